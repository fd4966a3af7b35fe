"""Synthetic traces for any catalogue shape: exercise the simulator at DeepSeek scale.

Never a measurement: the manifest says `synthetic: true` and every report labels it. The generator
is seeded and vectorised over nodes. What it models, each with a knob:

- trees grown the EAGLE-2 way (expand the `topk` best nodes of each depth by `topk` children, keep
  the `max_nodes` best by cumulative draft log-prob);
- acceptance: with probability `accept` the target's next token is one of a node's draft children,
  drawn by the draft's own probabilities (a calibrated draft), otherwise a token outside them;
- routing: the latent-state generator of routing/generator.py (token's own experts, the parent's
  experts, a per-request context, Zipf popularity; DeepSeek-V3 group limits for that family), whose
  knobs `ecosim synth --calibrate` fits to real routing; a node that is the same token in the same
  context as another (the accepted child at p and the root at p + 1) routes identically.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError
from ecosim.routing.generator import Router, RoutingKnobs, route_trees
from ecosim.routing.presets import KNOBS, preset_knobs, preset_source
from ecosim.synth_draft import default_draft, draft_manifest
from ecosim.trace.io import write_trace
from ecosim.tree_config import TREE

TASKS = ("coding", "reasoning", "qa", "dialogue")


@dataclass(frozen=True)
class SynthConfig:
    """Knobs of the synthetic generator (each is an `ecosim synth` option)."""

    requests: int = 4
    positions: int = 256  # per request
    depth: int = TREE.depth
    topk: int = TREE.topk
    max_nodes: int = TREE.max_nodes  # candidates kept besides the root
    accept: float = 0.8  # P(target's next token is among the draft's children)
    confidence: float = 0.6  # mean draft probability of the top child
    skew: float = 1.0  # Zipf exponent of expert popularity (0 = uniform)
    token_affinity: float = 0.5  # weight of the token's own experts in the router's score
    parent_affinity: float = 0.3  # weight of the previous token's (parent's) experts
    context: float = 0.0  # strength of the per-request context (0 = none)
    context_share: float = 0.0  # > 0: the context is a support of this share of the experts
    draft: str | None = None  # draft kind imitated (synth_draft.py); default: the family's
    draft_model: dict | None = None  # a separate dense draft's params, bytes and layers (synth_draft.dense_draft)
    # > 0: label the trace sampled at this temperature (target-only verification): a sampled draft is accepted as
    # often as the target's sample falls among its children, which `accept` / `accept_len` must then say
    temperature: float = 0.0
    accept_len: float | None = None  # published acceptance length to match (sets `accept`)
    # the (depth, topk, max_nodes) tree `accept_len` was measured on (None: this config's own tree): matched
    # there, the per-node acceptance then grows this config's tree, so a deeper or wider one accepts what
    # that acceptance implies at each depth (saturating), and `tune` can compare step counts on one trace
    accept_at: tuple[int, int, int] | None = None
    # level d's acceptance is accept * accept_decay^(d - 1): how acceptance falls with depth (1: every level alike;
    # fitted on a published curve of step counts where one exists, catalog/accept_table.py `falloff`)
    accept_decay: float = 1.0
    preset: str = ""  # where the routing knobs came from (recorded in the manifest)
    prompt_len: int = 64
    active_vocab: int = 4096  # tokens drawn from the most frequent this many (Zipf 1.1)
    gates: bool = False
    seed: int = 0


class _Tokens:
    """Token ids drawn from a Zipf over the `active_vocab` most frequent, so tokens repeat."""

    def __init__(self, cfg: SynthConfig, vocab: int, rng: np.random.Generator):
        n = min(cfg.active_vocab, vocab)
        w = 1.0 / np.arange(1, n + 1) ** 1.1
        self.cdf = np.cumsum(w / w.sum())
        self.ids = rng.permutation(vocab)[:n].astype(np.int32)
        self.rng = rng

    def draw(self, shape: tuple[int, ...]) -> np.ndarray:
        ranks = np.minimum(np.searchsorted(self.cdf, self.rng.random(shape)), len(self.ids) - 1)
        return self.ids[ranks]

    def distinct(self, shape: tuple[int, ...]) -> np.ndarray:
        """Draws whose last axis holds distinct ids (siblings carry distinct tokens)."""
        x = self.draw(shape).reshape(-1, shape[-1])
        return _dedup(x[:, None, :], lambda rows: self.draw(rows.shape + (shape[-1],))).reshape(shape)


def _grow_trees(n_trees: int, cfg: SynthConfig, tokens: _Tokens, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """EAGLE-2 expansion of `n_trees` trees at once: (trees, nodes) arrays, node ids topological."""
    T, K = n_trees, cfg.topk
    widths = [min(K, K**d) if d else 1 for d in range(cfg.depth)]  # frontier size per depth
    cap = 1 + K * sum(widths)
    parent = np.full((T, cap), -1, dtype=np.int64)
    depth = np.zeros((T, cap), dtype=np.int64)
    tok = np.zeros((T, cap), dtype=np.int32)
    logq = np.zeros((T, cap), dtype=np.float32)
    cum = np.zeros((T, cap), dtype=np.float64)
    nxt = tokens.draw((T, cap)).astype(np.int32)  # leaves: the target's next is some other token
    rows = np.arange(T)[:, None]
    frontier = np.zeros((T, 1), dtype=np.int64)
    used = 1
    rest = 0.5 ** np.arange(K - 1)
    for d in range(1, cfg.depth + 1):
        F = frontier.shape[1]
        conf = np.clip(rng.beta(4 * cfg.confidence, 4 * (1 - cfg.confidence), (T, F)), 1e-3, 0.999)
        q = np.concatenate([conf[..., None], (1 - conf[..., None]) * 0.9 * rest / rest.sum()], axis=-1)
        kids = tokens.distinct((T, F, K))
        # The target's verdict at each expanded node: a child drawn by the draft's probabilities, or outside.
        picked = rng.random((T, F)) < min(1.0, cfg.accept * cfg.accept_decay ** (d - 1))
        rank = (rng.random((T, F, 1)) * q.sum(-1, keepdims=True) > np.cumsum(q, -1)).sum(-1)
        chosen = np.take_along_axis(kids, np.minimum(rank, K - 1)[..., None], -1)[..., 0]
        outside = tokens.draw((T, F))
        clash = (kids == outside[..., None]).any(-1)
        while clash.any():
            outside[clash] = tokens.draw((int(clash.sum()),))
            clash = (kids == outside[..., None]).any(-1)
        nxt[rows, frontier] = np.where(picked, chosen, outside)
        ids = used + np.arange(F * K).reshape(F, K)
        used += F * K
        parent[:, ids] = frontier[:, :, None]
        depth[:, ids] = d
        tok[:, ids] = kids
        logq[:, ids] = np.log(q).astype(np.float32)
        cum[:, ids] = np.take_along_axis(cum, frontier, 1)[:, :, None] + np.log(q)
        level = ids.reshape(-1)
        best = np.argsort(-cum[:, level], axis=1, kind="stable")[:, : min(K, len(level))]
        frontier = level[best]
    cum_children = cum[:, 1:used]
    keep = np.sort(np.argsort(-cum_children, axis=1, kind="stable")[:, : cfg.max_nodes] + 1, axis=1)
    keep = np.concatenate([np.zeros((T, 1), dtype=np.int64), keep], axis=1)
    new_id = np.full((T, cap), -1, dtype=np.int64)
    new_id[rows, keep] = np.arange(keep.shape[1])
    par_old = parent[rows, keep]
    out = {
        "node": np.broadcast_to(np.arange(keep.shape[1]), keep.shape).astype(np.int16),
        "parent": np.where(par_old >= 0, new_id[rows, np.maximum(par_old, 0)], -1).astype(np.int16),
        "depth": depth[rows, keep].astype(np.int8),
        "token": tok[rows, keep],
        "draft_logprob": logq[rows, keep],
        "target_next": nxt[rows, keep],
    }
    agree = np.take_along_axis(nxt, np.maximum(par_old, 0), 1) == out["token"]
    tlp = np.where(agree, np.log(rng.uniform(0.5, 1.0, keep.shape)), np.log(rng.uniform(1e-4, 0.3, keep.shape)))
    tlp[:, 0] = np.nan
    out["target_logprob"] = tlp.astype(np.float32)
    return out


def calibrated(model: ModelShape | str, **overrides: Any) -> SynthConfig:
    """The config that routes like the shape's shipped preset (fitted to real gpt-oss-20b routing, or
    scaled from that fit by shape: the preset's `source` says which), other fields from `overrides`.
    Reports and benchmarks take their synthetic big-model traces from here."""
    k = preset_knobs(model)
    knobs = {name: getattr(k, name) for name in KNOBS}
    return SynthConfig(**{**knobs, "preset": preset_source(model), **overrides})


def knobs_for(model: ModelShape, cfg: SynthConfig) -> RoutingKnobs:
    """The generator's knobs for a shape: the config's, plus the shape's group limits (its family's unless it carries its own)."""
    n_group, topk_group = model.group_limits
    return RoutingKnobs(cfg.token_affinity, cfg.parent_affinity, cfg.context, cfg.skew, cfg.context_share, n_group, topk_group)


def accepted_length(nodes: dict[str, np.ndarray], per_tree: int) -> float:
    """Mean tokens per step when whole trees are verified: 1 + depth of the accepted chain, where a
    node is accepted if its parent is and its token is the target's next after the parent."""
    tok = nodes["token"].reshape(-1, per_tree)
    nxt = nodes["target_next"].reshape(-1, per_tree)
    par = nodes["parent"].reshape(-1, per_tree).astype(np.int64)
    dep = nodes["depth"].reshape(-1, per_tree).astype(np.int64)
    rows = np.arange(len(tok))[:, None]
    acc = np.zeros(tok.shape, dtype=bool)
    acc[:, 0] = True
    for d in range(1, int(dep.max(initial=0)) + 1):
        at = dep == d
        p = np.maximum(par, 0)
        ok = acc[rows, p] & (tok == nxt[rows, p])
        acc[at] = ok[at]
    return float((np.where(acc, dep, 0).max(axis=1) + 1).mean())


def accept_for_length(cfg: SynthConfig, target: float, trees: int = 512) -> float:
    """The per-node `accept` whose trees reach a mean accepted length of `target` (bisection on a
    sample of trees grown with the shape the length was measured on, `accept_at`, else the
    config's own; routing plays no part)."""
    if cfg.accept_at is not None:
        depth, topk, nodes = cfg.accept_at
        cfg = replace(cfg, depth=depth, topk=topk, max_nodes=nodes, accept_at=None)

    def length(a: float) -> float:
        c = replace(cfg, accept=a)
        rng = np.random.default_rng(cfg.seed)
        out = _grow_trees(trees, c, _Tokens(c, 50_000, rng), rng)
        return accepted_length(out, out["node"].shape[1])

    top = length(1.0)
    if not 1.0 <= target <= top:
        raise EcoSimError(f"acceptance length {target} is out of reach of trees of depth {cfg.depth}, topk {cfg.topk}, "
                          f"{cfg.max_nodes} nodes (1 to {top:.2f})")
    lo, hi = 0.0, 1.0
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if length(mid) < target else (lo, mid)
    return (lo + hi) / 2


def _dedup(x: np.ndarray, resample: Any) -> np.ndarray:
    """Replace repeated experts within a (node, layer) until each holds k distinct ids."""
    k = x.shape[2]
    earlier = np.tril(np.ones((k, k), dtype=bool), -1)
    xs = np.sort(x, axis=2)
    rows, layers = np.nonzero((xs[:, :, 1:] == xs[:, :, :-1]).any(axis=2))
    del xs
    for _ in range(64):
        if len(rows) == 0:
            return x
        sub = x[rows, layers]
        dup = ((sub[:, :, None] == sub[:, None, :]) & earlier).any(axis=2)
        sub = np.where(dup, resample(layers), sub)
        x[rows, layers] = sub
        still = ((sub[:, :, None] == sub[:, None, :]) & earlier).any(axis=(1, 2))
        rows, layers = rows[still], layers[still]
    raise RuntimeError("could not draw distinct experts; is num_experts < top_k?")


def synthesize(model: ModelShape, cfg: SynthConfig,
               route: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Manifest, positions and nodes of a synthetic trace.

    route=False skips the routing, nine tenths of the work on a big model: every node reads experts
    0..k-1 (no gates). For searches over acceptance, where routing plays no part: the trees, tokens and
    verdicts are those of the routed trace, since the router draws from its own generator, last."""
    if cfg.accept_len is not None:
        cfg = replace(cfg, accept=accept_for_length(cfg, cfg.accept_len))
    rng = np.random.default_rng(cfg.seed)
    tokens = _Tokens(cfg, model.vocab_size, rng)
    T, P = cfg.requests * cfg.positions, cfg.positions
    trees = _grow_trees(T, cfg, tokens, rng)
    # Continuity: each root is the target's greedy token after the previous root.
    roots = trees["token"][:, 0].reshape(cfg.requests, P)
    roots[:, 0] = tokens.draw((cfg.requests,))
    roots[:, 1:] = trees["target_next"][:, 0].reshape(cfg.requests, P)[:, :-1]
    trees["token"][:, 0] = roots.reshape(-1)
    n = trees["node"].shape[1]
    nodes = {k: np.ascontiguousarray(v).reshape(-1) for k, v in trees.items()}
    nodes["request_id"] = np.repeat(np.arange(cfg.requests), P * n).astype(np.int32)
    nodes["pos"] = np.tile(np.repeat(np.arange(P), n), cfg.requests).astype(np.int32)
    if route:
        router = Router(model.num_moe_layers, model.num_experts, model.top_k, knobs_for(model, cfg), cfg.requests, cfg.seed)
        experts, gates = route_trees(router, nodes, np.arange(T + 1, dtype=np.int64) * n)
        nodes["experts"] = experts.reshape(len(experts), -1)
        if cfg.gates:
            nodes["gates"] = gates.reshape(len(experts), -1)
    else:
        first = np.tile(np.arange(model.top_k, dtype=np.int16), model.num_moe_layers)
        nodes["experts"] = np.broadcast_to(first, (len(nodes["token"]), len(first))).copy()
    positions = {
        "request_id": np.repeat(np.arange(cfg.requests), P).astype(np.int32),
        "pos": np.tile(np.arange(P), cfg.requests).astype(np.int32),
        "context_len": (cfg.prompt_len + np.tile(np.arange(P), cfg.requests)).astype(np.int32),
        "n_nodes": np.full(T, n, dtype=np.int16),
    }
    requests = [{"request_id": r, "task": TASKS[r % len(TASKS)], "positions": P} for r in range(cfg.requests)]
    return base_manifest(model, cfg, requests), positions, nodes


def base_manifest(model: ModelShape, cfg: SynthConfig, requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest of a generated trace (provenance synthetic; hybrid.py relabels its own)."""
    return {
        "synthetic": True,
        "provenance": {"kind": "synthetic", "source": f"ecosim synth ({cfg.preset or 'knobs as given'})"},
        "model": model.to_manifest(),
        "draft": draft_manifest(model, cfg.draft or default_draft(model), cfg.accept_len, cfg.accept, cfg.draft_model,
                                cfg.accept_decay),
        "tree": {"depth": cfg.depth, "topk": cfg.topk, "max_nodes": cfg.max_nodes},
        "decoding": {"mode": "greedy"} if not cfg.temperature else
                    {"mode": "sample", "temperature": cfg.temperature, "top_p": 1.0, "top_k": 0, "seed": cfg.seed,
                     "verify": "target-only"},
        "requests": requests,
        "recorded_on": {"generator": "ecosim synth", "config": dict(cfg.__dict__)},
    }



def write_synthetic(path: Path, model: ModelShape, cfg: SynthConfig) -> Path:
    manifest, positions, nodes = synthesize(model, cfg)
    return write_trace(path, manifest, positions, nodes)
