"""The step model against published measurements (`ecosim fidelity`).

Every row of catalog/data/published.json whose setting the simulator can reproduce (`sim`) is
predicted from a synthetic trace of its model shape (dtype applied; routed as the shape's shipped
preset, fitted to real gpt-oss-20b routing or scaled from it: routing/presets), on its hardware and
placement, after its context:

- plain decode (tok/s or ms/token): `ar` over the trace, seconds per token;
- speculative rows: the generator's acceptance knob is bisected until `confidence` at the row's
  budget (verified tokens - 1) on trees of its depth and top-k accepts the row's mean accept length
  (bonus token included); the speedup is ar's time per token over confidence's, the draft priced
  by its kind (catalog/drafts.py);
- step-time ratios: confidence's seconds per step over ar's (draft included, as the rows are).

A row's `sim.serving` sets the serving-profile terms its engine declares (e.g. `spec_overlap`
false for SGLang before spec v2, whose scheduler cannot overlap a speculative step's host work).
A row of an engine release that launched more kernels per layer than the fused count declares them
(`extra_layer_kernels`, serving.py: counted or estimated from that release's source, its notes say which).
A row's `sim.model` is a catalogue shape or a Hugging Face config.json (or its folder; a relative path is
the table's folder's), and `sim.preset` may name the routing preset its speculative rows need where the
shape has no shipped one (`ecosim synth --model CONFIG --calibrate ROUTING OUT` fits one).
A row's `sim.nodes` (default 1) says its placement spans that many nodes: every collective then
crosses the device's inter-node fabric (its data file's internode_link_bw / internode_latency_s).
A row with `separate` (why, quoting the source) measured a configuration its own source calls
unoptimised or broken: it is predicted and shown, but summarised apart from the targets' rows.

Every predicted time is linear in the serving profile's free constants theta = (step_fixed_s,
kernel_latency_s, collective_latency_s, spec_level_s, spec_sync_s): t(theta) = r + f . theta (they
only add terms, outside any max), so each row is priced six times (theta = 0 and each unit vector)
and fits are exact linear algebra: theta minimises the relative error of seconds per token over
the declared fit set (`fit: true`: plain rows and speculative tok/s rows), non-negative, and
leave-one-out refits without each fit row to predict it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.catalog.devices import get_device
from ecosim.catalog.drafts import draft_cost
from ecosim.catalog.dtypes import at_dtype
from ecosim.catalog.models import ModelShape, get_model, in_catalogue
from ecosim.catalog.hosts import load_host
from ecosim.catalog.serving import ServingProfile, load_serving
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.fidelity_sampled import check_temperatures
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.routing.presets import knobs_of, load_preset, shipped_preset
from ecosim.synth import SynthConfig, calibrated, synthesize
from ecosim.trace.io import Trace, full_manifest

PUBLISHED = Path(__file__).parent / "catalog" / "data" / "published.json"
FREE = ("step_fixed_s", "kernel_latency_s", "collective_latency_s", "spec_level_s", "spec_sync_s")
# Rows whose sim names an engine profile of their own (`sim.profile`: llama.cpp, KTransformers, ...) are fitted apart,
# on their own fit rows, over the terms such an engine adds: a fixed time per step, its GPU kernels' latency, and a
# time per host layer.
HOST_FREE = ("step_fixed_s", "kernel_latency_s", "host_layer_s")
PLAIN = ("decode_tok_s", "decode_ms_per_token")
# step_ratio: a forward of `sim.tokens` consecutive tokens over a forward of one (llama-bench pp with n_ubatch = n):
# how a verification step's time grows with its tokens, the draft left out.
METRICS = (*PLAIN, "spec_speedup", "spec_tok_s", "verify_step_ratio", "step_ratio")
POSITIONS = 64  # per request of a synthetic trace; 2 requests


def load_rows(path: Path = PUBLISHED) -> list[dict[str, Any]]:
    """The published rows, each checked: a URL, a known metric, a positive value, serving terms a profile has."""
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EcoSimError(f"{path}: not a published-measurements table ({e})") from None
    terms = {f.name for f in dataclasses.fields(ServingProfile)} - {"name", "source", "sources", "fitted_on"}
    for r in rows:
        sim = r.get("sim") or {}
        if not str(r.get("url", "")).startswith("http") or r.get("metric") not in METRICS:
            raise EcoSimError(f"{path}: row {r.get('id')!r} needs an http(s) url and a metric in {', '.join(METRICS)}")
        if not isinstance(r.get("value"), (int, float)) or r["value"] <= 0:
            raise EcoSimError(f"{path}: row {r['id']!r}: value must be a positive number")
        if "separate" in r and (not isinstance(r["separate"], str) or not r["separate"].strip() or r.get("fit")):
            raise EcoSimError(f"{path}: row {r['id']!r}: separate must say why, quoting the source, and a separate row cannot be fitted")
        serving = sim.get("serving", {})
        if not isinstance(serving, dict) or set(serving) - terms:
            raise EcoSimError(f"{path}: row {r['id']!r}: sim.serving must be an object of serving-profile terms ({', '.join(sorted(terms))})")
        try:  # its values checked as a profile's are
            ServingProfile.from_dict({"name": f"row {r['id']}", **serving})
        except TypeError:
            raise EcoSimError(f"{path}: row {r['id']!r}: sim.serving values must be numbers (spec_overlap true or false)") from None
        if sim:
            _locate(sim, path, r["id"])
        nodes = sim.get("nodes", 1)
        if not isinstance(nodes, int) or nodes < 1:
            raise EcoSimError(f"{path}: row {r['id']!r}: sim.nodes must be a whole number >= 1")
    check_temperatures(rows, path)
    return rows


def _locate(sim: dict[str, Any], table: Path, row_id: str) -> None:
    """Check a row's sim.model and sim.preset, and record where they are. A catalogue name stays itself;
    anything else is a path relative to the table's folder (never the working directory), resolved into
    `_model` / `_preset` (kept apart, so what prints is what the table says) and read now, so a bad one is
    one line naming the table and the row before any pricing."""
    where = f"{table}: row {row_id!r}"
    for key in ("model", "preset"):
        v = sim.get(key)
        if key == "preset" and v is None:
            continue
        if not isinstance(v, str) or not v:
            raise EcoSimError(f"{where}: sim.{key} must be a catalogue name or a path")
        if key == "model" and in_catalogue(v):
            continue
        p = Path(v) if Path(v).is_absolute() else table.parent / v
        if not p.exists():
            raise EcoSimError(f"{where}: sim.{key} {v!r}: no such file or folder beside the table ({p})")
        sim["_" + key] = str(p.resolve())
        try:
            get_model(sim["_model"]) if key == "model" else load_preset(sim["_preset"])
        except EcoSimError as e:
            raise EcoSimError(f"{where}: {e}") from None


def _model(sim: dict[str, Any]) -> str:
    return sim.get("_model", sim["model"])


def model_label(sim: dict[str, Any]) -> str:
    """The row's model as tables print it: the shape's name (a config.json's folder name, not its path)."""
    return get_model(_model(sim)).name


@dataclass(frozen=True)
class Linear:
    """Seconds as r + f . theta over the free constants FREE."""

    r: float
    f: tuple[float, ...]

    def at(self, theta: np.ndarray) -> float:
        return float(self.r + np.dot(self.f, theta))


@dataclass
class Priced:
    """A row's predicted times (linear in theta) and the synthetic trace's accept length."""

    plain_token: Linear  # ar, seconds per token
    spec_token: Linear | None = None  # confidence, seconds per token
    spec_step: Linear | None = None  # confidence, seconds per step
    plain_step: Linear | None = None
    accept_len: float | None = None
    accept_knob: float | None = None


def _synth(sim: dict[str, Any], speculative: bool, **fields: Any) -> SynthConfig:
    """A synthetic trace's config routed like the row's model: the preset its `sim.preset` names (a model
    outside the catalogue: fit one with `ecosim synth --model CONFIG --calibrate ROUTING OUT`), else the
    shape's shipped preset (gpt-oss-20b's fit to real routing, or that fit scaled to the shape:
    routing/presets), so a verified tree reads the union real routing would give it, not the generator's
    unfitted defaults. A plain step routes one token, whose top-k experts the knobs barely move (which
    device holds them under ep:N, at most a fraction of a percent), so a model without a preset is priced
    with the defaults there; a speculative row needs one."""
    if sim.get("preset"):
        p = load_preset(sim.get("_preset", sim["preset"]))
        return SynthConfig(**knobs_of(p), preset=f"preset {sim['preset']}: {p['source']}", **fields)
    shape = get_model(_model(sim))
    if shipped_preset(shape):
        return calibrated(shape, **fields)
    if speculative:
        raise EcoSimError(f"fidelity: no routing preset for {sim['model']!r}: a speculative row needs one "
                          "(sim.preset; fit it with ecosim synth --calibrate)")
    return SynthConfig(**fields)


def _trace(shape: ModelShape, cfg: SynthConfig) -> Trace:
    manifest, positions, nodes = synthesize(shape, cfg)
    return Trace(Path(f"synthetic-{shape.name}"), full_manifest(manifest), positions, nodes)


def _linear(replay: TraceReplay, spec: PolicySpec, costs: list[CostModel], per: str) -> Linear:
    rows = [replay.run(spec, c) for c in costs]
    denom = [float(x.tokens if per == "token" else x.steps) for x in rows]
    t = [x.time_s / d for x, d in zip(rows, denom)]
    return Linear(t[0], tuple(x - t[0] for x in t[1:]))


def _costs(shape: ModelShape, sim: dict[str, Any], base: ServingProfile, depth: int,
           free: tuple[str, ...] = FREE) -> list[CostModel]:
    device = get_device(sim["hardware"])
    if int(sim.get("nodes", 1)) > 1:  # the placement spans nodes: its collectives cross the inter-node fabric
        device = device.across_nodes()
    device = device.replace(link_bw=sim.get("link_bw"), link_latency_s=sim.get("link_latency_s"))
    place = parse_placement(sim["placement"])
    draft = draft_cost({"kind": sim.get("draft", "eagle3")}, shape)
    out = []
    engine = ServingProfile.from_dict(sim.get("serving") or {}, base)  # the row's declared engine terms, checked
    host = load_host(sim["host"]) if sim.get("host") else None  # experts in host RAM (cpu-moe[:N], cpu)
    for unit in (None, *free):
        prof = engine.replace(**{k: (1.0 if k == unit else 0.0) for k in free})
        out.append(CostModel(shape, device, place, CostConfig(serving=prof, host=host), tree_depth=depth, draft=draft))
    out[0].check(int(sim["context"]) + POSITIONS + 64)
    return out


def price_row(row: dict[str, Any], base: ServingProfile, free: tuple[str, ...] = FREE) -> Priced:
    """The row's times under `base` with theta free (see the module docstring)."""
    kind = "plain" if row["metric"] in PLAIN else "ratio" if row["metric"] == "step_ratio" else "spec"
    return _price(json.dumps(row["sim"], sort_keys=True), kind, base, free)


def _shape(sim: dict[str, Any]) -> ModelShape:
    """The row's model at its dtype, with `sim.top_k` experts per token where it selects fewer (KTransformers'
    "6 experts" runs of an 8-expert model)."""
    shape = at_dtype(get_model(_model(sim)), sim["dtype"])
    return dataclasses.replace(shape, top_k=int(sim["top_k"])) if sim.get("top_k") else shape


def _ratio(replay: TraceReplay, costs: list[CostModel], n: int, ctx: int) -> Priced:
    """A forward of n consecutive tokens against one: the union of n consecutive continuation tokens' experts
    (ar's steps, within a request), priced as plain forwards of n and of 1 tokens."""
    steps = replay.steps(PolicySpec("ar"))
    req, bits = steps.request, steps.bits
    starts = [i for i in range(len(req) - n + 1) if req[i] == req[i + n - 1]]
    union = np.stack([np.bitwise_or.reduce(bits[i:i + n], axis=0) for i in starts])
    one = bits[starts]

    def lin(u: np.ndarray, tokens: int) -> Linear:
        t = []
        for c in costs:
            per = c.placement.union_per_group(u, c.model.num_experts)
            tok = np.full(len(u), tokens)
            t.append(float(c.step_times(per, tok, np.full(len(u), ctx), speculative=False).mean()))
        return Linear(t[0], tuple(x - t[0] for x in t[1:]))

    single = lin(one, 1)
    return Priced(single, spec_step=lin(union, n), plain_step=single, spec_token=single)


@lru_cache(maxsize=256)
def _price(sim_json: str, kind: str, base: ServingProfile, free: tuple[str, ...] = FREE) -> Priced:
    """price_row's work, shared by rows of one setting (a tok/s row and its speedup row)."""
    sim = json.loads(sim_json)
    shape = _shape(sim)
    ctx = int(sim["context"])
    plain = kind != "spec"
    routed = _synth(sim, not plain)  # read once: the bisection below only changes the acceptance knob
    if plain:
        replay = TraceReplay(_trace(shape, dataclasses.replace(routed, requests=2, positions=POSITIONS, depth=1, topk=1,
                                                               max_nodes=1, prompt_len=ctx)))
        costs = _costs(shape, sim, base, 0, free)
        if kind == "ratio":
            return _ratio(replay, costs, int(sim["tokens"]), ctx)
        return Priced(_linear(replay, PolicySpec("ar"), costs, "token"))
    depth, topk, verified = int(sim["depth"]), int(sim["topk"]), int(sim["verified"])
    budget = verified - 1
    nodes = max(budget, min(topk + (depth - 1) * topk * topk, 64))
    spec = PolicySpec("confidence", budget)

    def replay_at(accept: float) -> tuple[TraceReplay, float]:
        cfg = dataclasses.replace(routed, requests=2, positions=POSITIONS, depth=depth, topk=topk, max_nodes=nodes,
                                  accept=accept, prompt_len=ctx)
        r = TraceReplay(_trace(shape, cfg))
        steps = r.steps(spec)
        return r, float(steps.tokens.sum() / len(steps))

    lo, hi = 0.0, 1.0
    best: tuple[float, TraceReplay, float] | None = None
    for _ in range(8):  # bisection on the generator's acceptance knob
        mid = (lo + hi) / 2
        r, al = replay_at(mid)
        if best is None or abs(al - sim["accept_len"]) < abs(best[2] - sim["accept_len"]):
            best = (mid, r, al)
        lo, hi = (mid, hi) if al < sim["accept_len"] else (lo, mid)
    assert best is not None
    knob, replay, al = best
    costs = _costs(shape, sim, base, depth, free)
    return Priced(_linear(replay, PolicySpec("ar"), costs, "token"), _linear(replay, spec, costs, "token"),
                  _linear(replay, spec, costs, "step"), _linear(replay, PolicySpec("ar"), costs, "step"), al, knob)


def predict(row: dict[str, Any], p: Priced, theta: np.ndarray) -> float:
    """The row's metric as the simulator predicts it under theta."""
    m = row["metric"]
    t = p.plain_token.at(theta)
    if m == "decode_tok_s":
        return 1.0 / t
    if m == "decode_ms_per_token":
        return 1e3 * t
    assert p.spec_token is not None and p.spec_step is not None and p.plain_step is not None
    if m == "spec_speedup":
        return t / p.spec_token.at(theta)
    if m == "spec_tok_s":
        return 1.0 / p.spec_token.at(theta)
    return p.spec_step.at(theta) / p.plain_step.at(theta)


def _seconds(row: dict[str, Any]) -> float:
    """The seconds per token a time row publishes (tok/s rows inverted)."""
    return row["value"] / 1e3 if row["metric"] == "decode_ms_per_token" else 1.0 / row["value"]


def _time(row: dict[str, Any], p: Priced) -> Linear:
    """The predicted seconds per token a time row is compared with."""
    if row["metric"] == "spec_tok_s":
        assert p.spec_token is not None
        return p.spec_token
    return p.plain_token


def fit_theta(rows: list[dict[str, Any]], priced: dict[str, Priced]) -> np.ndarray:
    """Non-negative theta minimising sum ((t(theta) - y) / y)^2 over the fit rows (every subset of
    active constants solved by least squares; 5 constants, so 31 subsets)."""
    use = [r for r in rows if r["metric"] in (*PLAIN, "spec_tok_s") and r["id"] in priced]
    if not use:
        raise EcoSimError("fidelity: no plain-decode or speculative tok/s row in the fit set")
    y = np.array([_seconds(r) for r in use])
    lin = [_time(r, priced[r["id"]]) for r in use]
    X = np.array([x.f for x in lin]) / y[:, None]
    b = (y - np.array([x.r for x in lin])) / y
    n = X.shape[1]
    best, err = np.zeros(n), float(np.sum(b**2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sol, *_ = np.linalg.lstsq(X[:, cols], b, rcond=None)
            if (sol < 0).any():
                continue
            theta = np.zeros(n)
            theta[list(cols)] = sol
            e = float(np.sum((X @ theta - b) ** 2))
            if e < err:
                best, err = theta, e
    return best


@dataclass
class Result:
    row: dict[str, Any]
    predicted: float
    error: float  # (predicted - published) / published
    loo_error: float | None  # the same with theta fitted without this row (fit rows only)
    accept_len: float | None
    terms: dict[str, float] | None = None  # an engine profile's own fitted terms (rows with sim.profile), else None


def run(base: ServingProfile, fit: bool = True, rows: list[dict[str, Any]] | None = None,
        progress: Callable[[str], None] | None = None) -> tuple[list[Result], np.ndarray, list[dict[str, Any]]]:
    """Predict every row; returns the results, the theta used, and the rows not predicted. Rows naming an engine
    profile (`sim.profile`) are fitted apart over HOST_FREE, each group on its own fit rows; their terms are in
    each Result's `terms`."""
    rows = load_rows() if rows is None else rows
    todo = [r for r in rows if r.get("sim")]
    groups: dict[str | None, list[dict[str, Any]]] = {}
    for r in todo:
        groups.setdefault(r["sim"].get("profile"), []).append(r)
    results: dict[str, Result] = {}
    theta = np.array([getattr(base, k) for k in FREE])
    for name, members in groups.items():
        b, free = (base, FREE) if name is None else (load_serving(name), HOST_FREE)
        got, th = _run_group(b, free, fit, members, progress)
        results.update({x.row["id"]: x for x in got})
        if name is None:
            theta = th
        else:
            for x in got:
                x.terms = dict(zip(free, map(float, th)))
    return [results[r["id"]] for r in todo], theta, [r for r in rows if not r.get("sim")]


def _run_group(base: ServingProfile, free: tuple[str, ...], fit: bool, todo: list[dict[str, Any]],
               progress: Callable[[str], None] | None) -> tuple[list[Result], np.ndarray]:
    priced: dict[str, Priced] = {}
    for r in todo:
        if progress:
            progress(r["id"])
        priced[r["id"]] = price_row(r, base, free)
    fit_rows = [r for r in todo if r.get("fit")]
    theta = fit_theta(fit_rows, priced) if fit and fit_rows else np.array([getattr(base, k) for k in free])
    out = []
    for r in todo:
        p = priced[r["id"]]
        pred = predict(r, p, theta)
        loo = None
        if fit and r.get("fit"):
            others = [x for x in fit_rows if x["id"] != r["id"]]
            loo = predict(r, p, fit_theta(others, priced)) / r["value"] - 1 if others else None
        out.append(Result(r, pred, pred / r["value"] - 1, loo, p.accept_len))
    return out, theta


def summary(results: list[Result]) -> dict[str, Any]:
    """Per group of metric: count, median and worst absolute error, within 15% / 30% (plain on
    held-out rows and on all rows; leave-one-out over the plain rows), sign right for speedups.
    Rows marked `separate` are left out of every group and listed under "separate" with their errors."""
    def stats(errs: list[float]) -> dict[str, Any]:
        a = np.abs(np.array(errs))
        if not len(a):
            return {"rows": 0}
        return {"rows": int(len(a)), "median_abs_error": float(np.median(a)), "worst_abs_error": float(a.max()),
                "within_15pct": int((a <= 0.15).sum()), "within_30pct": int((a <= 0.30).sum()),
                "within_10pct": int((a <= 0.10).sum())}

    apart = [x for x in results if x.row.get("separate")]
    host = [x for x in results if x.row["sim"].get("profile") and not x.row.get("separate")]  # engines fitted apart
    results = [x for x in results if not x.row.get("separate") and not x.row["sim"].get("profile")]
    plain = [x for x in results if x.row["metric"] in PLAIN]
    out: dict[str, Any] = {
        "plain_all": stats([x.error for x in plain]),
        "plain_held_out": stats([x.error for x in plain if not x.row.get("fit")]),
        "plain_fit_set": stats([x.error for x in plain if x.row.get("fit")]),
        "plain_leave_one_out": stats([x.loo_error if x.loo_error is not None else x.error for x in plain]),
    }
    sp = [x for x in results if x.row["metric"] == "spec_speedup"]
    out["spec_speedup"] = {**stats([x.error for x in sp]),
                           "sign_right": int(sum((x.predicted > 1) == (x.row["value"] > 1) for x in sp))}
    out["spec_tok_s"] = stats([x.error for x in results if x.row["metric"] == "spec_tok_s"])
    out["verify_step_ratio"] = stats([x.error for x in results if x.row["metric"] == "verify_step_ratio"])
    out["separate"] = [{"id": x.row["id"], "metric": x.row["metric"], "error": x.error, "why": x.row["separate"]} for x in apart]
    if host:  # experts in host memory: each engine profile fitted on its own rows (absent where a table has none)
        hp = [x for x in host if x.row["metric"] in PLAIN]
        out["host_plain_held_out"] = stats([x.error for x in hp if not x.row.get("fit")])
        out["host_plain_fit_set"] = stats([x.error for x in hp if x.row.get("fit")])
        out["host_step_ratio"] = stats([x.error for x in host if x.row["metric"] == "step_ratio" and not x.row.get("fit")])
    return out


def fitted_profile(base: ServingProfile, theta: np.ndarray, fit_ids: list[str]) -> ServingProfile:
    """`base` with theta written in and the rows it was fitted on."""
    return dataclasses.replace(base, **{k: float(v) for k, v in zip(FREE, theta)}, fitted_on=tuple(fit_ids))
