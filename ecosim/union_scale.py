"""How many experts a step really adds for each new expert the predictor says it adds.

The auto policy prices a node by the experts its *predicted* routing adds to the selection
(marginal.py). A predictor that scatters where the true routing repeats itself (the synthetic and
scaled presets' token predictor predicts unions about 1.7x the true ones) makes every node look
dearer than it is, and the growth stops early. So the policy scales each predicted new expert by

    beta(k) = sum of true new experts of the k-th node / sum of its predicted new experts,

counted over the trees of the *other* requests (leave-requests-out, the folds of acceptance.py),
each tree grown in confidence order (cum_logprob, then id), so "new" is relative to the nodes
above it, as in the growth, and k is the node's place in that order. It depends on k because the
true routing repeats itself within a tree more than a scattering prediction does: measured on the
synthetic GPT-OSS-120B trace, beta is about 0.85 for the first eight nodes and falls to about 0.1
by the sixtieth. Counts are pooled over the ranks k - k/4 .. k + k/4 so the thin tail is smooth.
beta = 1 exactly for the oracle predictor (its prediction is the routing); a single-request trace
is counted in-sample (`in_sample`). It fixes the predictor's bias in the *amount* of routing by
rank, not which node wakes which expert; offload cache misses are not scaled (a cache holds the
experts the true routing reuses, so predicted misses are biased differently).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ecosim.acceptance import fold_of_rows
from ecosim.predictors.sets import PredictedSets, set_of
from ecosim.tree import Trees


@njit(cache=True, inline="always")
def _mark(ids, x, seen):
    """Mark row x's experts (ids (rows, layers, m), -1 pads) in seen (layers, experts); return how many were new."""
    c = 0
    for l in range(ids.shape[1]):
        for j in range(ids.shape[2]):
            e = ids[x, l, j]
            if e >= 0 and not seen[l, e]:
                seen[l, e] = True
                c += 1
    return c


@njit(cache=True)
def new_counts(start, n_nodes, cum_logprob, predicted, true, num_experts, fold, n_folds, ranks, index=None):
    """(folds, ranks, 2) predicted and true new experts of the k-th non-root node of each tree (k =
    1 .. ranks - 1), each counted against the union of the nodes before it in confidence order.
    Row x's predicted set is predicted[index[x]] (predictors/sets.py), predicted[x] when `index` is None."""
    out = np.zeros((n_folds, ranks, 2))
    seen_p = np.zeros((predicted.shape[1], num_experts), dtype=np.bool_)
    seen_t = np.zeros((true.shape[1], num_experts), dtype=np.bool_)
    for i in range(len(start)):
        s0, n = start[i], n_nodes[i]
        order = s0 + np.argsort(-cum_logprob[s0:s0 + n], kind="mergesort")  # stable: ties by id
        seen_p[:] = False
        seen_t[:] = False
        _mark(predicted, set_of(index, s0), seen_p)  # the root first: what every other node is new against
        _mark(true, s0, seen_t)
        f, rank = fold[i], 0
        for x in order:  # then every other node in confidence order
            if x == s0:
                continue
            rank += 1
            out[f, rank, 0] += _mark(predicted, set_of(index, x), seen_p)
            out[f, rank, 1] += _mark(true, x, seen_t)
    return out


def union_scale(trees: Trees, predicted: PredictedSets | np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(beta (folds, ranks), fold of each tree, in_sample): beta[f, k] fitted on the trees not in fold f."""
    ranks = int(trees.n_nodes.max(initial=1)) + 1
    fold = fold_of_rows(trees)[trees.start]
    n_folds = int(fold.max(initial=0)) + 1
    beta = np.ones((n_folds, ranks))
    true = trees.trace.experts_3d()
    sets = PredictedSets.of(predicted)
    if sets.index is None and _same_array(sets.table, true):  # the prediction is the routing (the oracle): 1 by definition, no count
        return beta, fold, n_folds == 1
    counts = new_counts(trees.start, trees.n_nodes, trees.cum_logprob, sets.table, true,
                        trees.trace.model.num_experts, fold, n_folds, ranks, sets.index)
    for f in range(n_folds):
        c = counts.sum(axis=0) - counts[f] if n_folds > 1 else counts[f]
        for k in range(1, ranks):
            lo, hi = max(1, k - k // 4), min(ranks, k + k // 4 + 1)
            p, t = c[lo:hi, 0].sum(), c[lo:hi, 1].sum()
            beta[f, k] = t / p if p > 0 else 1.0
    return beta, fold, n_folds == 1


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a and b are views of the same elements (same memory, shape, strides and type)."""
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])
