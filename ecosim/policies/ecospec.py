"""`ecospec`: cost-aware growth of the verified subtree, scored against the experts already woken.

`ecospec` scores a frontier node x against the buffer B (the predicted experts, per MoE layer, of
the nodes chosen so far, root included):

    value(x)  = exp(cum_logprob(x))          P(x is accepted) if the draft is calibrated; adding x
                                             raises the expected accepted length by exactly this
    cost(x)   = |pred(x) \\ B| / (L * k)      new experts x would wake, as a fraction of the experts
                                             one token with no overlap wakes (L MoE layers, top-k)
    difference score:  value - lambda * cost  (default; stop when every frontier score is < 0)
    ratio score:       value / (1 + lambda * cost)   (never stops early; fills the budget)

Why the difference: it is the marginal gain of a knapsack-style objective (expected tokens minus
lambda x expected expert reads), so lambda reads as "tokens one fresh token's experts are worth"
and the stop rule falls out of it. Both scores rank by value alone at lambda = 0, and ties go to
the higher cum_logprob, then the lower node id, so lambda = 0 selects exactly what `confidence`
selects. The cost is counted in experts, not seconds, so one lambda serves every device.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ecosim.policies.base import Context, Knobs, Policy
from ecosim.policies.knobs import BUDGET, LAMBDA, PREDICTOR, SCORE
from ecosim.predictors.sets import PredictedSets
from ecosim.tree import Trees

Score = Literal["difference", "ratio"]


def select_ecospec(
    trees: Trees, budget: int, lam: float, predicted: PredictedSets | np.ndarray, num_experts: int, top_k: int,
    score: Score = "difference", offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Greedy cost-aware growth from the root, vectorised over trees (see the module docstring).

    `predicted` is the predicted expert sets (predictors/sets.py), or (rows, layers, m) ids per node
    (-1 pads); `offsets` is `ecospec_offsets(predicted, num_experts)` when the caller has it cached.
    The selection is the root plus the nodes `ecospec_order` picks in its first `budget` steps.
    """
    return (trees.depth == 0) | (ecospec_order(trees, budget, lam, predicted, num_experts, top_k, score, offsets) < budget)


def ecospec_order(
    trees: Trees, budget: int, lam: float, predicted: PredictedSets | np.ndarray, num_experts: int, top_k: int,
    score: Score = "difference", offsets: np.ndarray | None = None, distinct: bool = False,
) -> np.ndarray:
    """The step (0, 1, ...) at which ecospec's greedy growth picks each row within `budget` steps;
    `budget` for the rows it does not pick, and -1 for roots.

    The growth never looks at the budget: the budget only ends it. So the picks of the first b
    steps are the selection at every budget b <= `budget`, and one run at the largest budget of a
    sweep serves all of its budgets.

    Each step picks, per tree, the frontier node of best score (ties: higher cum_logprob, then
    lower node id) and adds its predicted experts to the tree's buffer, a (layers x experts) byte
    table. Exact but lazy: a node's score only rises as the buffer grows (its new experts only
    shrink), so a score computed at an earlier step is a lower bound. It is also bounded above: the
    buffer has grown by g experts since, so the node's new experts fell by at most g, and its score
    is at most what it would be with `max(new - g, 0)` new experts (at most its value). A step
    re-scores the node of highest upper bound, then only the frontier nodes whose upper bound
    reaches the best score known, since no other can win or tie.

    `offsets` (`ecospec_offsets(predicted, ...)`) may be given; otherwise each chunk of trees
    computes its rows' own (`distinct` as there), so no (rows, layers x m) table outlives a chunk;
    sets held once each are offset once each, and a chunk gathers its rows' offsets.
    """
    order = np.where(trees.depth == 0, -1, budget).astype(np.int32)
    if budget == 0:
        return order
    sets = PredictedSets.of(predicted)
    layers = sets.table.shape[1]
    norm = float(layers * top_k)

    def scored(v: np.ndarray, count: np.ndarray) -> np.ndarray:
        new = count / norm
        return v - lam * new if score == "difference" else v / (1.0 + lam * new)

    value_all = np.exp(trees.cum_logprob)
    n_max = int(trees.n_nodes.max(initial=1))
    parent_local = trees.trace.nodes["parent"].astype(np.int64)
    span = layers * (num_experts + 1)  # one tree's buffer; byte 0 is always set (pads point there)
    chunk = max(8, (1 << 20) // span)  # ~1 MB of buffers at a time (stays in L2 with its indices)
    width = layers * sets.table.shape[2]
    # sets held once each (predictors/sets.py): each set's offsets once, each chunk's rows a gather of them
    by_set = ecospec_offsets(sets.table, num_experts, distinct=distinct) if offsets is None and sets.index is not None else None
    for a in range(0, trees.n_trees, chunk):
        t = np.arange(a, min(a + chunk, trees.n_trees))
        n = trees.n_nodes[t]
        valid = np.arange(n_max)[None, :] < n[:, None]
        rows = np.where(valid, trees.start[t][:, None] + np.arange(n_max)[None, :], 0)
        lo, hi = int(trees.start[t[0]]), int(trees.start[t[-1]] + n[-1])  # the chunk's rows, contiguous
        if offsets is None:
            off = ecospec_offsets(sets.table[lo:hi], num_experts, distinct=distinct) if by_set is None else by_set[sets.index[lo:hi]]
            orow = np.where(valid, rows - lo, 0)
        else:
            off, orow = offsets, rows
        value = np.where(valid, value_all[rows], -np.inf)
        cum = np.where(valid, trees.cum_logprob[rows], -np.inf)
        parent = np.where(valid, parent_local[rows], -2)
        base = np.arange(len(t), dtype=np.int64) * span
        buffer = np.zeros(len(t) * span, dtype=bool)
        buffer[base] = True
        root = buffer[base[:, None] + off[orow[:, 0]]]
        size = width - np.count_nonzero(root, axis=1)  # experts in each tree's buffer
        buffer[base[:, None] + off[orow[:, 0]]] = True
        lower = np.full(valid.shape, -np.inf)  # score when last computed: a lower bound on it now
        upper = value.copy()  # an upper bound on the score now
        seen_new = np.zeros(valid.shape, dtype=np.int64)  # new experts when last scored
        seen_size = np.zeros(valid.shape, dtype=np.int64)  # the buffer's size then
        was_scored = np.zeros(valid.shape, dtype=bool)
        frontier = valid & (parent == 0)
        active = np.ones(len(t), dtype=bool)

        def rescore(ti: np.ndarray, xi: np.ndarray) -> None:  # exact scores of these nodes now
            hit = buffer[base[ti, None] + off[orow[ti, xi]]]
            count = hit.shape[1] - np.count_nonzero(hit, axis=1)
            lower[ti, xi] = scored(value[ti, xi], count)
            seen_new[ti, xi] = count
            seen_size[ti, xi] = size[ti]
            was_scored[ti, xi] = True

        for step in range(budget):
            if np.count_nonzero(active) * 2 < len(active):  # most trees have stopped: keep the others
                keep = np.flatnonzero(active)
                valid, rows, value, cum, parent, base = valid[keep], rows[keep], value[keep], cum[keep], parent[keep], base[keep]
                orow = orow[keep]
                size, lower, upper, seen_new, seen_size = size[keep], lower[keep], upper[keep], seen_new[keep], seen_size[keep]
                was_scored, frontier, active = was_scored[keep], frontier[keep], active[keep]
            ix = np.arange(len(active))
            live = frontier & active[:, None]
            if not live.any():
                break
            ui, uj = np.nonzero(live & was_scored)
            grown = size[ui] - seen_size[ui, uj]
            upper[ui, uj] = scored(value[ui, uj], np.maximum(seen_new[ui, uj] - grown, 0))
            # the most promising node of each tree first (as lazy greedy does), then every node
            # whose upper bound still reaches the best score known
            has = ix[live.any(axis=1)]
            top = np.argmax(np.where(live[has], upper[has], -np.inf), axis=1)
            rescore(has, top)
            stale = live.copy()
            stale[has, top] = False
            floor = np.where(live, lower, -np.inf).max(axis=1)
            rescore(*np.nonzero(stale & (upper >= floor[:, None])))
            s = np.where(live, lower, -np.inf)  # exact wherever it can be the best
            best = s.max(axis=1)
            tie = live & (s == best[:, None])
            c = np.where(tie, cum, -np.inf)
            tie &= c == c.max(axis=1)[:, None]
            pick = np.argmax(tie, axis=1)  # first True: the lowest node id among exact ties
            go = live.any(axis=1) & (best >= 0 if score == "difference" else True)
            active &= go
            g, x = ix[go], pick[go]
            order[rows[g, x]] = step
            frontier[g, x] = False
            size[g] += seen_new[g, x]  # the winner was scored this step: its count is exact
            buffer[base[g, None] + off[orow[g, x]]] = True
            frontier[g] |= (parent[g] == x[:, None]) & valid[g]
    return order


def ecospec_offsets(predicted: np.ndarray, num_experts: int, chunk: int = 1 << 12, distinct: bool = False) -> np.ndarray:
    """(rows, layers * m) offsets into a tree's (layers x (experts + 1)) buffer of each predicted
    expert, `layer * (experts + 1) + id + 1`; 0 (the always-set byte) for pads and for repeats of an
    id within a layer, so counting the unset bytes a node points at counts its distinct new experts.

    `distinct=True` says the caller knows no id repeats within a (row, layer) (a validated trace's
    true routing: the reader rejects repeats), which skips the slot-by-slot comparison.
    """
    rows, layers, m = predicted.shape
    span = layers * (num_experts + 1)
    dtype = np.int16 if span <= np.iinfo(np.int16).max else np.int32
    out = np.empty((rows, layers, m), dtype=dtype)
    if distinct:
        flat = predicted.reshape(rows, layers * m)
        lane_flat = np.repeat(np.arange(layers, dtype=dtype) * (num_experts + 1) + 1, m)[None, :]
        for a in range(0, rows, chunk):
            ids = flat[a : a + chunk]
            off = out.reshape(rows, layers * m)[a : a + chunk]
            np.add(ids, lane_flat, out=off, dtype=dtype, casting="unsafe")
            np.multiply(off, ids >= 0, out=off, casting="unsafe")
        return out.reshape(rows, layers * m)
    lane = (np.arange(layers, dtype=dtype) * (num_experts + 1) + 1)[None, :]
    for a in range(0, rows, chunk):
        slots = [np.ascontiguousarray(predicted[a : a + chunk, :, s]) for s in range(m)]
        for s, ids in enumerate(slots):
            keep = ids >= 0
            for earlier in slots[:s]:
                keep &= ids != earlier
            off = ids.astype(dtype) + lane
            off *= keep
            out[a : a + chunk, :, s] = off
    return out.reshape(rows, layers * m)


def order(ctx: Context, knobs: Knobs) -> tuple[np.ndarray, float]:
    """The pick order at the spec's budget (exact for every smaller budget; see `ecospec_order`).
    The buffer offsets are computed a chunk of trees at a time, not kept: a table the size of the
    predictions, per trace, cost more memory than recomputing them costs time."""
    p, budget, shape = knobs["predictor"], knobs["budget"], ctx.shape
    return ecospec_order(ctx.trees, budget, knobs["lam"], ctx.predicted(p), shape.num_experts, shape.top_k, knobs["score"],
                         distinct=ctx.true_routing(p)), budget


POLICY = Policy(
    "ecospec", "Cost-aware greedy growth: value - lambda x new experts (this module's docstring).",
    knobs=(BUDGET, LAMBDA, PREDICTOR, SCORE), order=order, budget="budget",
    label_knobs=("budget", "lam", "predictor"), weight=lambda knobs, pricings: 10.0 + knobs["budget"],
)
