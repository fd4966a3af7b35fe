"""`evict` (EVICT, arXiv 2605.00342): truncate the confidence-ordered tree to its most cost-effective
prefix, estimating each candidate's benefit from drafter signals and the verification cost from an
offline profile. Only the paper's abstract was available to us; the rule implemented is the one it
states: per step, the prefix k of the confidence order maximising

    (1 + sum of the first k values) / (C(k) + draft)

where C(k) is the profiled step time of verifying k + 1 tokens: the mean over the trace's positions
of the priced time of `confidence` at budget k (a profile of this hardware and model, not of this
step's experts). The draft is paid whatever the cut: the tree was drafted before EVICT truncates it.
"""

from __future__ import annotations

import numpy as np

from ecosim import bitsets
from ecosim.cost import CostModel
from ecosim.policies.base import Context, Knobs, Policy
from ecosim.policies.confidence import confidence_rank, select_confidence
from ecosim.policies.ecospec_auto import values
from ecosim.policies.knobs import VALUE
from ecosim.tree import Trees


def union_counts(trees: Trees, selected: np.ndarray, cost: CostModel) -> np.ndarray:
    """(trees, layers) distinct true experts of each tree's selection, per device under ep:N."""
    rows = np.flatnonzero(selected)
    m = cost.model
    bits = bitsets.pack_groups(trees.trace.experts_3d(), trees.tree_of_row[rows], trees.n_trees, m.num_experts, rows=rows)
    return cost.placement.union_per_group(bits, m.num_experts)


def profiled_cost(trees: Trees, rank: np.ndarray, cost: CostModel, max_budget: int) -> np.ndarray:
    """C(k), k = 0..max_budget: mean priced step time (no draft) of `confidence` at budget k."""
    ctx = trees.trace.positions["context_len"].astype(np.int64)
    out = np.zeros(max_budget + 1)
    for k in range(max_budget + 1):
        sel = select_confidence(trees, k, rank=rank)
        n = trees.selected_count(sel)
        times = cost.layer_times(union_counts(trees, sel, cost), n).sum(axis=1) + cost.other_times(n, ctx, speculative=False)
        out[k] = float(times.mean())
    return out


def evict_prefix(v: np.ndarray, size: np.ndarray, profile: np.ndarray, draft: float) -> np.ndarray:
    """EVICT's cut per tree: argmax over k <= size of (1 + v[k]) / (profile[k] + draft), with v[k]
    the summed value of the k most confident nodes (v[:, 0] = 0); the smallest k on ties."""
    valid = np.arange(v.shape[1])[None, :] <= size[:, None]
    rate = np.where(valid, (1.0 + v) / (profile[None, : v.shape[1]] + draft), -np.inf)
    return np.argmax(rate, axis=1)


def select(ctx: Context, knobs: Knobs) -> np.ndarray:
    t, cost = ctx.trees, ctx.cost
    assert cost is not None
    kmax = int(t.n_nodes.max(initial=1)) - 1
    rank = ctx.memo(("confidence_rank",), lambda: confidence_rank(t))
    c = profiled_cost(t, rank, cost, kmax)
    value = values(ctx, knobs["value"])
    nonroot = t.depth > 0
    table = np.zeros((t.n_trees, kmax + 1))
    np.add.at(table, (t.tree_of_row[nonroot], rank[nonroot] + 1), value[nonroot])
    best = evict_prefix(np.cumsum(table, axis=1), t.n_nodes - 1, c, cost.draft_time(speculative=True))
    return (t.depth == 0) | (rank < best[t.tree_of_row])


POLICY = Policy("evict", "EVICT: the confidence order cut at its most cost-effective prefix against a profiled step time.",
                knobs=(VALUE,), select=select, priced=True, weight=lambda knobs, pricings: 5.0 + pricings)
