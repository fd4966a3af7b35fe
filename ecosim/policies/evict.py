"""`evict` (EVICT, arXiv 2605.00342): truncate the confidence-ordered tree to its most cost-effective
prefix, estimating each candidate's benefit from drafter signals and the verification cost from an
offline profile. Only the paper's abstract was available to us; the rule implemented is the one it
states: per step, the prefix k of the confidence order maximising

    (1 + sum of the first k values) / (C(k) + draft)

where C(k) is the profiled step time of verifying k + 1 tokens: the mean of the priced time of
`confidence` at budget k over PROFILE_STEPS positions spread evenly over the trace (all of them in
a shorter trace). That is what an offline profile is: this hardware and model measured on a few
steps, not this step's experts and not every step of the run. Measuring it on every position
instead moves evict's time per token by under 1% on every committed trace (a test holds it there)
and by 0.6% at most on the benchmark's synthetic DeepSeek-V3.1 traces, while a profile of every
position read every row of every tree (several times confidence's whole replay on 257-node trees), where a
fixed sample costs what a few steps cost. The draft is paid whatever the cut: the tree was
drafted before EVICT truncates it.
"""

from __future__ import annotations

import numpy as np

from numba import njit

from ecosim import bitsets
from ecosim.cost import CostModel
from ecosim.pairwise import pairwise, pairwise_plan
from ecosim.policies.base import Context, Knobs, Policy
from ecosim.policies.confidence import confidence_rank
from ecosim.policies.ecospec_auto import pricing_key, values
from ecosim.policies.knobs import VALUE
from ecosim.tree import Trees

CHUNK = 1 << 21  # (entry, layer, group) counts priced at a time: bounded temporaries
PROFILE_STEPS = 8  # positions the offline profile C(k) is measured on


def profile_steps(n_trees: int, steps: int = PROFILE_STEPS) -> np.ndarray:
    """The trees (positions) C(k) is measured on: `steps` of them spread evenly over the trace, in
    order, first and last included; every tree of a trace with no more than `steps`."""
    if n_trees <= steps:
        return np.arange(n_trees, dtype=np.int64)
    return np.unique(np.round(np.linspace(0, n_trees - 1, steps)).astype(np.int64))


def union_counts(trees: Trees, selected: np.ndarray, cost: CostModel) -> np.ndarray:
    """(trees, layers) distinct true experts of each tree's selection, per device under ep:N."""
    rows = np.flatnonzero(selected)
    m = cost.model
    bits = bitsets.pack_groups(trees.trace.experts_3d(), trees.tree_of_row[rows], trees.n_trees, m.num_experts, rows=rows)
    return cost.placement.union_per_group(bits, m.num_experts)


def profiled_cost(trees: Trees, rank: np.ndarray, cost: CostModel, max_budget: int,
                  pick: np.ndarray | None = None) -> np.ndarray:
    """C(k), k = 0..max_budget: mean priced step time (no draft) of `confidence` at budget k over
    the trees `pick` (sorted tree indices; all when None).

    Grown one budget at a time rather than re-selected per budget: from k to k + 1 each tree adds
    its node of rank k (a tree with fewer nodes keeps its whole selection, and its time). So one
    compiled pass walks each tree in rank order, adding each node to the tree's union and writing
    the union's size per group after it: one entry per row of the picked trees, where selecting and
    packing again at every budget grew with the square of the tree size. Every entry is priced
    once (elementwise, as pricing the whole selection at once would), and C(k) is the mean over
    the picked trees of their entry at min(k, nodes - 1), the same array as the direct computation,
    so the same float (tests/test_speed.py keeps the direct form as the reference).
    """
    m, p = cost.model, cost.placement
    pick = np.arange(trees.n_trees, dtype=np.int64) if pick is None else np.asarray(pick, dtype=np.int64)
    start = trees.start[pick]
    size = np.minimum(trees.n_nodes[pick] - 1, max_budget)  # picks each tree makes by the largest budget
    first = np.concatenate([[0], np.cumsum(size + 1)])  # entry of (tree, k) = first[tree] + k
    kids = trees.n_nodes[pick] - 1  # the picked trees' non-root rows, each tree's after its root
    rows = np.repeat(start + 1 - np.concatenate([[0], np.cumsum(kids)[:-1]]), kids) + np.arange(int(kids.sum()))
    tree = np.repeat(np.arange(len(pick)), kids)
    keep = rank[rows] < max_budget
    rows, tree = rows[keep], tree[keep]
    order = np.empty(int(first[-1]), dtype=np.int64)  # the row each entry adds: the root, then by rank (no sort)
    order[first[:-1]] = start
    order[first[tree] + 1 + rank[rows]] = rows
    group = bitsets.device_of_expert(m.num_experts, p.groups) if p.groups > 1 else np.zeros(m.num_experts, dtype=np.int64)
    experts = trees.trace.experts_3d()
    tokens = np.arange(first[-1]) - np.repeat(first[:-1], size + 1) + 1  # tokens verified: k + 1
    ctx = np.repeat(trees.trace.positions["context_len"].astype(np.int64)[pick], size + 1)
    table = _layer_table(cost, int(size.max(initial=0)) + 1)
    if table is not None:  # one group: each entry's time summed in the walk itself, no (entries, layers) table
        times = _grown_layer_sums(experts, order, first, table, pairwise_plan(m.num_moe_layers))
        times += cost.other_times(tokens, ctx, speculative=False)
    else:
        times = _grown_times(cost, experts, order, first, size, group, tokens, ctx)
    out = np.zeros(max_budget + 1)
    step = max(1, CHUNK // max(len(size), 1))  # budgets averaged at a time: a bounded (budgets, trees) table
    for k0 in range(0, max_budget + 1, step):
        k = np.arange(k0, min(k0 + step, max_budget + 1))
        # each row a budget's entries, contiguous: reduced along its last axis, as np.mean reduces one array
        out[k] = times[first[:-1][None, :] + np.minimum(k[:, None], size[None, :])].mean(axis=1)
    return out


def _grown_times(cost: CostModel, experts: np.ndarray, order: np.ndarray, first: np.ndarray, size: np.ndarray,
                 group: np.ndarray, tokens: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """Each entry's priced time from its (layers, groups) union counts, a piece of the trees at a time."""
    m, p = cost.model, cost.placement
    times = np.empty(int(first[-1]))
    bulk = np.cumsum((size + 1) * m.num_moe_layers * p.groups)  # counts up to each tree, for the pieces
    t0 = 0
    while t0 < len(size):  # trees t0..t1 at a time (at least one)
        t1 = max(t0 + 1, int(np.searchsorted(bulk, (bulk[t0 - 1] if t0 else 0) + CHUNK, side="right")))
        e0, e1 = int(first[t0]), int(first[t1])
        union = np.zeros((e1 - e0, m.num_moe_layers, p.groups), dtype=np.int64)
        _grown_unions(experts, order[e0:e1], first[t0 : t1 + 1] - e0, group.astype(np.int64), union)
        n = tokens[e0:e1]
        times[e0:e1] = cost.step_times(union, n, ctx[e0:e1], speculative=False)
        t0 = t1
    return times


def _layer_table(cost: CostModel, max_tokens: int) -> np.ndarray | None:
    """F(u, n): one MoE layer's seconds reading u experts for n tokens, (experts + 1, max_tokens + 1),
    priced by `layer_times` itself (elementwise, so each entry is the float it prices for a step);
    None under several groups (a layer waits for the slowest: not a function of one count), with
    some layers on the host (priced unlike the others), or when the table would be large."""
    e = cost.model.num_experts
    if cost.placement.groups > 1 or cost.host_mask is not None or (e + 1) * (max_tokens + 1) > CHUNK:
        return None
    # the count axis in the place of the layers (all priced alike here): n's terms once per n
    union = np.broadcast_to(np.arange(e + 1, dtype=np.float64)[None, :, None], (max_tokens + 1, e + 1, 1))
    return np.ascontiguousarray(cost.layer_times(union, np.arange(max_tokens + 1)).T)


@njit(cache=True)
def _add_row(experts, r, seen, count, group):
    """Count row r's experts not yet seen: count[layer, group of the expert] += 1 for each."""
    for l in range(experts.shape[1]):
        for i in range(experts.shape[2]):
            x = experts[r, l, i]
            if 0 <= x < len(group) and not seen[l, x]:
                seen[l, x] = True
                count[l, group[x]] += 1


@njit(cache=True)
def _grown_unions(experts, order, first, group, union):
    """union[e] = distinct experts per (layer, group) of the rows order[first[t]..e] of entry e's tree t
    (each tree's entries: its root, then its nodes in rank order); `group` (experts,) the group
    holding each expert."""
    seen = np.zeros((experts.shape[1], len(group)), dtype=np.bool_)
    count = np.zeros((experts.shape[1], union.shape[2]), dtype=np.int64)
    for t in range(len(first) - 1):
        seen[:] = False
        count[:] = 0
        for e in range(first[t], first[t + 1]):
            _add_row(experts, order[e], seen, count, group)
            union[e] = count


@njit(cache=True)
def _grown_layer_sums(experts, order, first, table, plan):
    """out[e] = the MoE layers' seconds of the rows order[first[t]..e] of entry e's tree t: per layer
    `table[distinct experts, e - first[t] + 1]`, summed over the layers as numpy's `sum(axis=1)` sums
    them (ecosim/pairwise.py), so the float the (entries, layers) table gave."""
    L = experts.shape[1]
    group = np.zeros(table.shape[0] - 1, dtype=np.int64)  # one group: every expert counts in column 0
    seen = np.zeros((L, len(group)), dtype=np.bool_)
    count = np.zeros((L, 1), dtype=np.int64)
    vals = np.empty(L, dtype=np.float64)
    stack = np.empty(plan.shape[0] + 1, dtype=np.float64)
    out = np.empty(first[-1], dtype=np.float64)
    for t in range(len(first) - 1):
        seen[:] = False
        count[:] = 0
        for e in range(first[t], first[t + 1]):
            _add_row(experts, order[e], seen, count, group)
            n = e - first[t] + 1
            for l in range(L):
                vals[l] = table[count[l, 0], n]
            out[e] = pairwise(vals, 0, plan, stack)
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
    rank = ctx.memo("confidence rank", lambda: confidence_rank(t))  # the key confidence keeps it under
    c = ctx.memo(("evict profile", *pricing_key(ctx)), lambda: profiled_cost(t, rank, cost, kmax, profile_steps(t.n_trees)))  # no knob in it
    value = values(ctx, knobs["value"])
    nonroot = t.depth > 0
    table = np.zeros((t.n_trees, kmax + 1))
    table[t.tree_of_row[nonroot], rank[nonroot] + 1] = value[nonroot]  # ranks are distinct within a tree
    best = evict_prefix(np.cumsum(table, axis=1), t.n_nodes - 1, c, cost.draft_time(speculative=True))
    return (t.depth == 0) | (rank < best[t.tree_of_row])


POLICY = Policy("evict", "EVICT: the confidence order cut at its most cost-effective prefix against a profiled step time.",
                knobs=(VALUE,), select=select, priced=True, weight=lambda knobs, pricings: 5.0 + pricings)
