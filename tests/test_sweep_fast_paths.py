"""The fast paths the sweep relies on equal their references: bitsets.pack / pack_groups, select_confidence and
select_ecospec were rewritten for speed; the straightforward versions they replaced are kept here as the
definition they must match, and the oracle chain's unions equal the padded reference under every placement.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import tiny_trace


def _pack_reference(experts: np.ndarray, num_experts: int) -> np.ndarray:
    rows, layers, k = experts.shape
    out = np.zeros((rows, layers, (num_experts + 63) // 64), dtype=np.uint64)
    for s in range(k):
        ids = experts[:, :, s].astype(np.int64)
        valid = ids >= 0
        word = np.where(valid, ids >> 6, 0)
        bit = np.where(valid, np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64)), np.uint64(0))
        out[np.arange(rows)[:, None], np.arange(layers)[None, :], word] |= bit
    return out


def _confidence_reference(trees, budget: int) -> np.ndarray:
    order = np.lexsort((trees.node, -trees.cum_logprob, trees.depth == 0, trees.tree_of_row))
    tree_sorted = trees.tree_of_row[order]
    first = np.searchsorted(tree_sorted, np.arange(trees.n_trees))
    rank = np.empty(trees.n_rows, dtype=np.int64)
    rank[order] = np.arange(trees.n_rows) - first[tree_sorted]
    return (trees.depth == 0) | (rank < budget)


def _ecospec_reference(trees, budget, lam, predicted, num_experts, top_k, score="difference") -> np.ndarray:
    from ecosim import bitsets

    selected = trees.depth == 0
    if budget == 0:
        return selected
    layers = predicted.shape[1]
    norm = float(layers * top_k)
    n_max = int(trees.n_nodes.max(initial=1))
    parent_local = trees.trace.nodes["parent"].astype(np.int64)
    t = np.arange(trees.n_trees)
    n = trees.n_nodes[t]
    valid = np.arange(n_max)[None, :] < n[:, None]
    rows = np.where(valid, trees.start[t][:, None] + np.arange(n_max)[None, :], 0)
    value = np.where(valid, np.exp(trees.cum_logprob)[rows], -np.inf)
    cum = np.where(valid, trees.cum_logprob[rows], -np.inf)
    parent = np.where(valid, parent_local[rows], -2)
    bits = _pack_reference(predicted[rows.ravel()], num_experts).reshape(len(t), n_max, layers, -1)
    buffer = bits[:, 0].copy()
    chosen = np.zeros(valid.shape, dtype=bool)
    chosen[:, 0] = True
    frontier = valid & (parent == 0)
    active = np.ones(len(t), dtype=bool)
    for _ in range(budget):
        live = frontier & active[:, None]
        if not live.any():
            break
        new = bitsets.count(bits & ~buffer[:, None]).sum(axis=-1) / norm
        s = value - lam * new if score == "difference" else value / (1.0 + lam * new)
        s = np.where(live, s, -np.inf)
        best = s.max(axis=1)
        tie = live & (s == best[:, None])
        c = np.where(tie, cum, -np.inf)
        tie &= c == c.max(axis=1)[:, None]
        pick = np.argmax(tie, axis=1)
        go = live.any(axis=1) & (best >= 0 if score == "difference" else True)
        active &= go
        g = t[go]
        chosen[g, pick[go]] = True
        frontier[g, pick[go]] = False
        buffer[g] |= bits[g, pick[go]]
        frontier[g] |= (parent[g] == pick[go][:, None]) & valid[g]
    selected[rows[chosen]] = True
    return selected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_selection_and_packing_equal_their_references(write, seed):
    from ecosim.bitsets import pack, pack_groups
    from ecosim.policies import ecospec_offsets, select_confidence, select_ecospec
    from ecosim.predictors.sets import PredictedSets
    from ecosim.trace.io import read_trace
    from ecosim.tree import Trees

    trace = read_trace(write(tiny_trace(seed, requests=3, positions=50, max_nodes=16, depth=5)))
    trees = Trees(trace)
    m = trace.model
    rng = np.random.default_rng(seed)
    # predictions with pads and repeated ids within a layer (a predictor may give either)
    noisy = rng.integers(-1, m.num_experts, size=(trees.n_rows, m.num_moe_layers, 5)).astype(np.int16)
    for predicted in (trace.experts_3d(), noisy):
        assert np.array_equal(pack(predicted, m.num_experts), _pack_reference(predicted, m.num_experts))
        groups = np.sort(rng.integers(0, 7, len(predicted)))
        want = np.zeros((8, *pack(predicted[:1], m.num_experts).shape[1:]), dtype=np.uint64)
        np.bitwise_or.at(want, groups, _pack_reference(predicted, m.num_experts))
        assert np.array_equal(pack_groups(predicted, groups, 8, m.num_experts), want)
        offsets = ecospec_offsets(predicted, m.num_experts)
        for budget, lam, score in [(0, 0.5, "difference"), (1, 0.5, "difference"), (4, 0.0, "difference"),
                                   (6, 0.3, "difference"), (12, 2.0, "difference"), (5, 1.0, "ratio"), (16, 0.1, "ratio")]:
            want = _ecospec_reference(trees, budget, lam, predicted, m.num_experts, m.top_k, score)
            got = select_ecospec(trees, budget, lam, predicted, m.num_experts, m.top_k, score)
            assert np.array_equal(got, want), (budget, lam, score)
            assert np.array_equal(select_ecospec(trees, budget, lam, predicted, m.num_experts, m.top_k, score, offsets=offsets), want)
            # the same sets held once each, every row an index into them (predictors/sets.py)
            table, index = np.unique(predicted, axis=0, return_inverse=True)
            got = select_ecospec(trees, budget, lam, PredictedSets(table, index.ravel()), m.num_experts, m.top_k, score)
            assert np.array_equal(got, want)
    for budget in (0, 1, 3, 8, 100):
        assert np.array_equal(select_confidence(trees, budget), _confidence_reference(trees, budget))


@pytest.mark.parametrize("placement", ["hbm", "ep:3", "offload:4"])
def test_oracle_chain_unions_equal_the_padded_reference(write, placement):
    """The oracle prices only the cuts a <= A(p) (chain_unions); the reference packs every cut."""
    from ecosim import bitsets
    from ecosim.catalog.devices import get_device
    from ecosim.cost import CostConfig
    from ecosim.oracle import shortest_path
    from ecosim.placements import parse_placement
    from ecosim.replay import TraceReplay
    from ecosim.simulate import ORACLE, cost_model
    from ecosim.trace.io import read_trace

    r = TraceReplay(read_trace(write(tiny_trace(5, requests=3, positions=60, depth=5))))
    cost = cost_model(r.trace, get_device("h200"), parse_placement(placement), CostConfig())
    t, m = r.trees, r.trace.model
    cuts = t.chain.shape[1]
    rows = np.where(t.chain >= 0, t.chain, 0)
    bits = _pack_reference(r.trace.experts_3d()[rows.ravel()], m.num_experts)
    bits = np.bitwise_or.accumulate(bits.reshape(t.n_trees, cuts, *bits.shape[1:]), axis=1)
    flat = bits.reshape(t.n_trees * cuts, *bits.shape[2:])
    a = np.tile(np.arange(cuts), t.n_trees)
    ctx = np.repeat(r.trace.positions["context_len"].astype(np.int64), cuts)
    costs = cost.step_times(cost.placement.union_per_group(flat, m.num_experts), a + 1, ctx, speculative=False)
    costs = (costs + np.where(a > 0, cost.draft_time(speculative=True), 0.0)).reshape(t.n_trees, cuts)
    want_time, want_pos = 0.0, []
    for _, sl in t.request_slices():
        total_s, path = shortest_path(costs[sl], t.accept_len[sl])
        want_time += total_s
        want_pos.append(sl.start + np.concatenate([[0], np.cumsum(path + 1)[:-1]]))
    steps = r.oracle_steps(cost)
    assert np.array_equal(steps.tree, np.concatenate(want_pos))  # the same shortest path, step for step
    got_time = r.price(steps, cost, cache=False)[0]
    assert got_time.sum() == pytest.approx(want_time, rel=1e-12)
    row = r.run(ORACLE, cost)
    assert row.tokens == r.trace.n_trees and row.expert_loads == int(bitsets.count(steps.bits).sum())
