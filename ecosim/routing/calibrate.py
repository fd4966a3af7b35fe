"""Fit the generator's knobs to real routing by moment matching, and the presets that result.

The moments (routing/stats.py's definitions, mean over layers): neighbour overlap, distinct
experts per window of n = 2, 4, 8, 16, 32, 64 tokens, token recall@k (the `token` predictor fitted
on half the sequences), and the median layer's busiest-expert share. The generator routes the
real sequences' own token streams (so token repetition, and hence recall, is the corpus's), on a
few layers (the knobs are shared by all layers, so the mean over layers needs few), always with
the same seed (common random numbers: the loss is then nearly smooth in the knobs). Nelder-Mead (in
the knobs' box) minimises

    loss = sum_n ((W_n - W*_n) / W*_n)^2 + 2 ((O - O*) / O*)^2 + ((R - R*) / R*)^2 + 0.3 ((M - M*) / M*)^2
           + 4 max_{n=2..64} ((W_n - W*_n) / W*_n)^2

(W: window-distinct curve, O: overlap, R: recall, M: busiest/fair; starred: real).

Fitting a shape other than the routing's own (`shape=`: more experts, another top-k, group limits),
the starred targets are the real moments scaled to that shape (scale.py: the effective tokens of
every window kept), and the generator runs with that shape's experts, top-k and group limits on
the same real token streams. The presets live in routing/presets/ (`preset_knobs(shape)`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.routing.data import Routing, starts
from ecosim.routing.generator import Router, RoutingKnobs, route_sequences
from ecosim.routing.presets import KNOBS, knobs_of, load_preset, preset_knobs, preset_path  # noqa: F401  (re-exported)
from ecosim.routing.scale import RULE, RoutingShape, scale_moments
from ecosim.routing.stats import neighbour_overlap, popularity, token_recall, window_distinct

WINDOWS = (2, 4, 8, 16, 32, 64)
FIT_LAYERS = 4
FIT_SEQUENCES = 64
BOUNDS = {"token_affinity": (0.0, 0.95), "parent_affinity": (0.0, 0.95), "context": (0.0, 12.0), "skew": (0.0, 3.0),
          "context_share": (0.05, 1.0)}
STEPS = {"token_affinity": 0.1, "parent_affinity": 0.08, "context": 2.0, "skew": 0.3, "context_share": 0.15}
START = RoutingKnobs(token_affinity=0.45, parent_affinity=0.2, context=6.0, skew=0.3, context_share=0.7)


def moments(r: Routing) -> dict[str, Any]:
    w = window_distinct(r, max(WINDOWS))
    rec = token_recall(r)
    return {
        "neighbour_overlap": float(np.nanmean(neighbour_overlap(r))),
        "window_distinct": {n: float(np.nanmean(w[n - 1])) for n in WINDOWS},
        "window_curve": [float(np.nanmean(w[n - 1])) for n in range(2, max(WINDOWS) + 1)],
        "token_recall": None if rec is None else float(rec["token"].mean()),
        "max_over_fair_median": float(np.median(popularity(r)["max_over_fair"])),
    }


def loss(m: dict[str, Any], target: dict[str, Any]) -> float:
    x = sum(((m["window_distinct"][n] - target["window_distinct"][n]) / target["window_distinct"][n]) ** 2 for n in WINDOWS)
    x += 6 * ((m["neighbour_overlap"] - target["neighbour_overlap"]) / target["neighbour_overlap"]) ** 2
    if target["token_recall"] is not None and m["token_recall"] is not None:
        x += ((m["token_recall"] - target["token_recall"]) / target["token_recall"]) ** 2
    x += 0.3 * ((m["max_over_fair_median"] - target["max_over_fair_median"]) / target["max_over_fair_median"]) ** 2
    # the target is every n within 10%: the worst n of the whole curve counts on its own
    worst = max(abs(a - b) / b for a, b in zip(m["window_curve"], target["window_curve"]) if b == b and a == a)
    x += 4 * worst**2
    return float(x)


def simulate(knobs: RoutingKnobs, tokens: list[np.ndarray], num_experts: int, top_k: int, layers: int = FIT_LAYERS,
             seed: int = 0) -> Routing:
    """Generated routing of these token streams (one request each)."""
    lens = np.array([len(t) for t in tokens], dtype=np.int64)
    P = int(lens.max(initial=1))
    grid = np.zeros((len(tokens), P), dtype=np.int64)
    for i, t in enumerate(tokens):
        grid[i, : len(t)] = t
    router = Router(layers, num_experts, top_k, knobs, len(tokens), seed)
    ex, _ = route_sequences(router, grid, np.arange(len(tokens)))
    keep = np.arange(P)[None, :] < lens[:, None]
    tok = np.concatenate([np.asarray(t, dtype=np.int64) for t in tokens])
    return Routing(ex[keep], tok, starts(lens), lens, num_experts, provenance="synthetic")


def fit(real: Routing, *, sequences: int = FIT_SEQUENCES, layers: int = FIT_LAYERS, seed: int = 0, iterations: int = 60,
        start: RoutingKnobs | None = None, free: tuple[str, ...] = KNOBS, shape: RoutingShape | None = None,
        progress: Callable[[str], None] | None = None) -> tuple[RoutingKnobs, dict[str, Any]]:
    """Knobs whose generated routing matches `real`'s moments (scaled to `shape` when given and not
    the routing's own); and the fit's record. Only the knobs named in `free` move (context and
    context_share trade off against each other: fixing one makes the rest identifiable, which is
    how the recovery test pins them)."""
    if len(real.seq_len) < 2 or real.seq_len.max(initial=0) < max(WINDOWS):
        raise EcoSimError(f"calibration needs at least 2 sequences and one of {max(WINDOWS)} tokens or more")
    own = RoutingShape(real.num_experts, real.top_k)
    to = shape or own
    target = moments(real)
    pick = np.sort(np.random.default_rng(seed).permutation(len(real.seq_len))[: min(sequences, len(real.seq_len))])
    sub = real.subset(pick)
    rec = token_recall(sub)
    target["token_recall"] = None if rec is None else float(rec["token"].mean())  # same corpus size as the simulation
    scaled = (to.num_experts, to.top_k) != (own.num_experts, own.top_k)
    real_target = target
    if scaled:
        target = scale_moments(target, own, to)
    tokens = [sub.token[a : a + n] for a, n in zip(sub.seq_start, sub.seq_len)]
    knobs0 = replace(start or START, n_group=to.n_group, topk_group=to.topk_group)

    def as_knobs(x: np.ndarray) -> RoutingKnobs:
        v = {k: float(np.clip(x[i], *BOUNDS[k])) for i, k in enumerate(free)}
        v["parent_affinity"] = min(v["parent_affinity"], 0.98 - v["token_affinity"])
        return replace(knobs0, **v)

    memo: dict[RoutingKnobs, tuple[float, dict[str, Any]]] = {}

    def score(x: np.ndarray) -> float:
        k = as_knobs(x)
        if k not in memo:
            m = moments(simulate(k, tokens, to.num_experts, to.top_k, layers, seed))
            memo[k] = (loss(m, target), m)
        return memo[k][0]

    # Nelder-Mead on the box (points clipped into it), from START and one step along each knob.
    x0 = np.array([getattr(knobs0, k) for k in free], dtype=float)
    simplex = [x0] + [x0 + np.eye(len(free))[i] * STEPS[k] for i, k in enumerate(free)]
    vals = [score(x) for x in simplex]
    for it in range(iterations):
        order = np.argsort(vals)
        simplex, vals = [simplex[i] for i in order], [vals[i] for i in order]
        if progress and it % 10 == 0:
            progress(f"iteration {it}/{iterations}: loss {vals[0]:.4f}, {as_knobs(simplex[0])}")
        centre = np.mean(simplex[:-1], axis=0)
        xr = centre + (centre - simplex[-1])
        fr = score(xr)
        if fr < vals[0]:
            xe = centre + 2 * (centre - simplex[-1])
            fe = score(xe)
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * (simplex[-1] - centre)
            fc = score(xc)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = xc, fc
            else:
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                vals = [vals[0]] + [score(x) for x in simplex[1:]]
    i = int(np.argmin(vals))
    knobs = as_knobs(simplex[i])
    best, got = memo[knobs]
    evals = len(memo)
    record = {"target": _plain(target), "achieved": _plain(got), "loss": round(best, 5), "evaluations": evals,
              "fit_layers": layers, "fit_sequences": len(pick), "seed": seed}
    if scaled:
        record["scaled"] = {"from": {"model": real.model, "num_experts": own.num_experts, "top_k": own.top_k},
                            "to": to.describe(), "rule": RULE, "real_target": _plain(real_target)}
    return knobs, record


def moments_plain(r: Routing) -> dict[str, Any]:
    """`moments` of a routing set, JSON-ready."""
    return _plain(moments(r))


def _plain(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    out["window_distinct"] = {str(n): round(v, 3) for n, v in m["window_distinct"].items()}
    out.pop("window_curve", None)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


# ------------------------------------------------------------------------------------ presets


def write_preset(path: Path, model: str, knobs: RoutingKnobs, record: dict[str, Any], source: str) -> Path:
    if path.exists():
        raise EcoSimError(f"{path}: exists; refusing to overwrite it")
    d = {"model": model, "knobs": {k: round(v, 4) for k, v in asdict(knobs).items() if k in KNOBS},
         "source": source, "fit": record}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d, indent=1) + "\n")
    return path
