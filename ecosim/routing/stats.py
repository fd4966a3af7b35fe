"""Routing statistics, one definition for real, hybrid and synthetic routing alike.

All are per MoE layer, then averaged over layers (`overall`). With A_t the top-k set of token t
at a layer, inside one sequence (never across two):

- neighbour overlap        mean_t |A_t ∩ A_{t+1}| / k
- distinct experts, window n     mean over every window of n consecutive tokens of |∪ A_t|, n = 1..64
- token recall@k           a per-token table (the `token` predictor, predictors/token.py) fitted
                           on a share of the sequences predicts the top-k of the others:
                           mean |pred_t ∩ A_t| / k; `popularity_recall` is the same with the layer's
                           popularity alone (what the token adds)
- popularity skew          busiest expert's routed share over the fair share k/E
                           (`max_over_fair`), and dead experts (never routed)
- group span               for group-limited routers (DeepSeek: n_group groups of E/n_group
                           experts, top-k drawn from topk_group of them): groups a token's top-k
                           spans per layer, the largest, and the share within topk_group
- same token, same context for traces: every pair of nodes reached by the same tokens from the
                           same request prefix (equal path hashes, routing/generator.py) must
                           route identically; the share that does, and how many pairs there are

For traces, the same on the target's continuation (the roots, what decoding routes), plus tree
statistics over every node: sibling overlap (pairs of children of one parent), parent-child
overlap, and distinct experts among the first m nodes of a tree (node ids are topological).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim.predictors.base import top_ids
from ecosim.predictors.token import TokenTable
from ecosim.routing.data import Routing
from ecosim.trace.io import Trace

MAX_WINDOW = 64
SHOWN_WINDOWS = (2, 4, 8, 16, 32, 64)


def bitsets(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """(rows, layers, k) expert ids -> (rows, layers, words) uint64 sets."""
    words = (num_experts + 63) // 64
    one = np.uint64(1)
    if words == 1:
        return np.bitwise_or.reduce(np.left_shift(one, experts.astype(np.uint64)), axis=2)[..., None]
    out = np.zeros((*experts.shape[:2], words), dtype=np.uint64)
    e = experts.astype(np.int64)
    for w in range(words):
        inside = (e >= 64 * w) & (e < 64 * (w + 1))
        bit = np.where(inside, np.left_shift(one, (e - 64 * w).clip(0, 63).astype(np.uint64)), np.uint64(0))
        out[..., w] = np.bitwise_or.reduce(bit, axis=2)
    return out


def popcount(x: np.ndarray) -> np.ndarray:
    """Set bits per (row, layer), summed over the words."""
    if hasattr(np, "bitwise_count"):
        c = np.bitwise_count(x)
        return c[..., 0] if c.shape[-1] == 1 else c.sum(axis=-1, dtype=np.int64)
    b = np.unpackbits(np.ascontiguousarray(x).view(np.uint8), axis=-1)  # pragma: no cover - numpy < 2
    return b.sum(axis=-1, dtype=np.int64)


def _masked_mean(counts: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over the rows where `valid`, per layer, without copying the rows out."""
    return np.einsum("n,nl->l", valid.astype(np.float64), counts.astype(np.float64)) / max(int(valid.sum()), 1)


def neighbour_overlap(r: Routing, b: np.ndarray | None = None) -> np.ndarray:
    """(layers,) mean share of top-k kept by the next token of the same sequence."""
    b = bitsets(r.experts, r.num_experts) if b is None else b
    same = np.diff(r.seq_id()) == 0
    if not same.any():
        return np.full(r.layers, np.nan)
    return _masked_mean(popcount(b[:-1] & b[1:]), same) / r.top_k


def window_distinct(r: Routing, max_n: int = MAX_WINDOW, b: np.ndarray | None = None) -> np.ndarray:
    """(max_n, layers): mean distinct experts over all windows of n = 1..max_n consecutive tokens
    of one sequence (NaN where no sequence is that long)."""
    b = bitsets(r.experts, r.num_experts) if b is None else b
    sid = r.seq_id()
    out = np.full((max_n, r.layers), np.nan)
    acc = b.copy()
    for n in range(1, max_n + 1):
        if n > 1:
            if len(acc) < 2:
                break
            acc = acc[:-1] | b[n - 1 :]
        bad = np.flatnonzero(sid[: len(acc)] != sid[n - 1 :])  # windows across two sequences: few
        if len(bad) == len(acc):
            break
        c = popcount(acc)
        out[n - 1] = (c.sum(axis=0, dtype=np.int64) - c[bad].sum(axis=0, dtype=np.int64)) / (len(acc) - len(bad))
    return out


def popularity(r: Routing) -> dict[str, Any]:
    """Per layer: busiest expert's share of routed slots over the fair share, and dead experts."""
    L, E = r.layers, r.num_experts
    counts = np.stack([np.bincount(r.experts[:, layer].ravel().astype(np.int64), minlength=E) for layer in range(L)])
    fair = counts.sum(axis=1) / E
    top = counts.max(axis=1) / np.maximum(fair, 1e-12)
    return {"max_over_fair": top, "dead": (counts == 0).sum(axis=1)}


def token_recall(r: Routing, fraction: float = 0.5, seed: int = 0) -> dict[str, np.ndarray] | None:
    """Recall@k per layer of the `token` predictor fitted on `fraction` of the sequences (a seeded
    split of whole sequences) on the others; None without tokens or with fewer than 2 sequences."""
    if len(r.seq_len) < 2 or (r.token < 0).all():
        return None
    train, test = r.split(fraction, seed)
    keep = train.token >= 0
    table = TokenTable.fit(train.token[keep], train.experts[keep], r.num_experts, 2 * r.top_k, 1.0)
    truth = bitsets(test.experts, r.num_experts)
    # The predicted set of each distinct table row once (-1: unseen, the prior), then a gather.
    idx = table.lookup(np.where(test.token >= 0, test.token, -(2**40)))
    rows, inv = np.unique(idx, return_inverse=True)
    pred = bitsets(top_ids(table.scores_of(rows), r.top_k), r.num_experts)[inv.ravel()]
    hits = popcount(pred & truth).sum(axis=0)
    prior = bitsets(top_ids(table.prior[None], r.top_k), r.num_experts)
    base = popcount(prior & truth).sum(axis=0)
    n = max(test.n_tokens, 1) * r.top_k
    return {"token": hits / n, "popularity": base / n}


def group_span(r: Routing, n_group: int, topk_group: int) -> dict[str, Any]:
    """Groups of E / n_group consecutive experts spanned by each token's top-k, per layer."""
    size = r.num_experts // n_group
    g = np.sort(r.experts.astype(np.int64) // size, axis=2)
    span = 1 + (np.diff(g, axis=2) != 0).sum(axis=2)  # (N, L) distinct groups
    return {"n_group": n_group, "topk_group": topk_group, "mean": float(span.mean()) if span.size else float("nan"),
            "max": int(span.max(initial=0)), "within_limit": float((span <= topk_group).mean()) if span.size else float("nan")}


def same_context(trace: Trace) -> dict[str, Any]:
    """Pairs of nodes with the same token path from the same request prefix, and the share routed identically."""
    from ecosim.routing.generator import path_hashes

    h = path_hashes(trace.nodes, trace.tree_start)
    order = np.argsort(h, kind="stable")
    same = h[order][1:] == h[order][:-1]
    ex = trace.nodes["experts"][order]
    ok = (ex[1:][same] == ex[:-1][same]).all(axis=1)
    return {"pairs": int(same.sum()), "identical": float(ok.mean()) if len(ok) else float("nan")}


def tree_stats(trace: Trace, max_size: int = 64) -> dict[str, Any]:
    """Sibling and parent-child overlap over every node, distinct experts in the first m nodes."""
    m = trace.model
    b = bitsets(trace.experts_3d(), m.num_experts)
    parent = trace.nodes["parent"].astype(np.int64)
    start = np.repeat(trace.tree_start[:-1], trace.positions["n_nodes"].astype(np.int64))
    child = np.flatnonzero(parent >= 0)
    prow = start[child] + parent[child]
    pc = popcount(b[child] & b[prow]).mean(axis=0) / m.top_k if len(child) else np.full(m.num_moe_layers, np.nan)
    # Siblings: children sorted by parent row; compare each child with the next d of the same parent.
    order = child[np.argsort(prow, kind="stable")]
    key = np.sort(prow, kind="stable")
    sib_sum, sib_n = np.zeros(m.num_moe_layers), 0
    for d in range(1, 65):
        same = key[d:] == key[:-d] if len(key) > d else np.zeros(0, bool)
        if not same.any():
            break
        sib_sum += popcount(b[order[:-d][same]] & b[order[d:][same]]).sum(axis=0)
        sib_n += int(same.sum())
    sib = sib_sum / max(sib_n, 1) / m.top_k if sib_n else np.full(m.num_moe_layers, np.nan)
    sizes = trace.positions["n_nodes"].astype(np.int64)
    roots = trace.tree_start[:-1]
    acc = np.zeros((len(roots), m.num_moe_layers, b.shape[2]), dtype=np.uint64)
    curve = []
    for size in range(1, min(max_size, int(sizes.max(initial=0))) + 1):
        has = sizes >= size
        acc[has] |= b[roots[has] + size - 1]
        curve.append(popcount(acc[has]).mean(axis=0))
    return {"sibling_overlap": sib, "parent_child_overlap": pc, "sibling_pairs": sib_n,
            "distinct_by_tree_size": np.array(curve) if curve else np.zeros((0, m.num_moe_layers))}


def _r(x: Any, nd: int = 3) -> Any:
    if isinstance(x, np.ndarray):
        return [None if not np.isfinite(v) else round(float(v), nd) for v in x.ravel()] if x.ndim == 1 else [_r(row, nd) for row in x]
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _mean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def routing_stats(r: Routing, trace: Trace | None = None, *, name: str = "", fraction: float = 0.5, seed: int = 0,
                  groups: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """Every statistic of the module docstring as one JSON-able dict (`overall` = mean over layers);
    `groups` = (n_group, topk_group) of a group-limited router, (0, 0) for none."""
    b = bitsets(r.experts, r.num_experts)
    ov = neighbour_overlap(r, b)
    win = window_distinct(r, b=b)
    pop = popularity(r)
    rec = token_recall(r, fraction, seed)
    out: dict[str, Any] = {
        "name": name, "model": r.model, "provenance": r.provenance, "source": r.source,
        "layers": r.layers, "num_experts": r.num_experts, "top_k": r.top_k,
        "sequences": int(len(r.seq_len)), "tokens": r.n_tokens,
        "overall": {
            "neighbour_overlap": _r(_mean(ov)),
            "window_distinct": {str(n): _r(_mean(win[n - 1]), 2) for n in range(1, MAX_WINDOW + 1)},
            "token_recall": None if rec is None else _r(_mean(rec["token"])),
            "popularity_recall": None if rec is None else _r(_mean(rec["popularity"])),
            "max_over_fair": _r(float(pop["max_over_fair"].max())),
            "max_over_fair_median_layer": _r(float(np.median(pop["max_over_fair"]))),
            "dead": int(pop["dead"].sum()),
        },
        "per_layer": {
            "neighbour_overlap": _r(ov),
            "window_distinct": {str(n): _r(win[n - 1], 2) for n in SHOWN_WINDOWS},
            "token_recall": None if rec is None else _r(rec["token"]),
            "max_over_fair": _r(pop["max_over_fair"]),
            "dead": [int(x) for x in pop["dead"]],
        },
        "recall_split": {"fit_fraction": fraction, "seed": seed},
    }
    if groups[0] > 1 and r.num_experts % groups[0] == 0:
        gs = group_span(r, *groups)
        out["group_span"] = {**gs, "mean": _r(gs["mean"]), "within_limit": _r(gs["within_limit"], 4)}
    if trace is not None:
        sc = same_context(trace)
        out["same_context"] = {"pairs": sc["pairs"], "identical": _r(sc["identical"], 4)}
        t = tree_stats(trace)
        curve = t["distinct_by_tree_size"]
        out["trees"] = {
            "sibling_overlap": _r(_mean(t["sibling_overlap"])),
            "parent_child_overlap": _r(_mean(t["parent_child_overlap"])),
            "sibling_pairs": t["sibling_pairs"],
            "distinct_by_tree_size": {str(i + 1): _r(_mean(row), 2) for i, row in enumerate(curve)},
        }
    return out
