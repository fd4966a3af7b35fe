"""Acceptance calibration worked by hand: recovering a known acceptance from a synthetic trace, the calibration
error, the acceptance table's shrinkage of thin cells, the union scale (true over predicted new experts, by
confidence rank, fitted on the other folds) and the per-tree rescale of values to accepted lengths.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import TINY, tiny_trace
from ecosim.acceptance import (AcceptanceModel, _sibling_rank, _tree_sums, calibrate, calibration_error, fold_of_rows,
                               sibling_rank)
from ecosim.trace.io import read_trace
from ecosim.tree import Trees


def test_calibration_recovers_a_known_acceptance(write):
    # synth: P(child accepted | parent accepted) = accept * q / (q0 + 0.9 (1 - q0)), q the child's
    # draft probability, q0 that of its most likely sibling (synth.py draws the verdict that way)
    accept = 0.7
    trace = read_trace(write(tiny_trace(4, requests=8, positions=200, accept=accept)))
    t = Trees(trace)
    cal = calibrate(t)
    q = np.exp(trace.nodes["draft_logprob"].astype(np.float64))
    rank = sibling_rank(t)
    q0 = np.zeros(t.n_rows)
    top = (t.depth > 0) & (rank == 0)
    q0_of_parent = np.zeros(t.n_rows)
    q0_of_parent[t.parent_row[top]] = q[top]
    q0 = q0_of_parent[t.parent_row]
    truth = accept * q / (q0 + 0.9 * (1 - q0))
    cond = (t.depth > 0) & t.accepted[t.parent_row]
    err = np.abs(cal.conditional[cond] - truth[cond])
    assert err.mean() < 0.05
    assert cal.ece < 0.03
    assert cal.ece < cal.raw_ece or cal.raw_ece < 0.03
    assert abs(cal.predicted_accept_len - cal.observed_accept_len) < 0.15 * cal.observed_accept_len + 0.05
    assert not cal.in_sample


@st.composite
def forest(draw):
    """Trees as (start, n_nodes, parent, lp): node x's parent below x, log-probs from a few values (ties)."""
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=5)) + draw(st.sampled_from([[], [80]]))
    parent, lp = [], []
    for n in sizes:  # an 80-node tree: its large families (over 32 children) sorted, not compared pairwise
        parent += [-1] + [draw(st.integers(0, min(x - 1, 1 if n > 12 else x - 1))) for x in range(1, n)]
        lp += [0.0] + [draw(st.sampled_from([-0.1, -0.5, -0.5, -2.0])) for _ in range(1, n)]
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return start, np.array(sizes, dtype=np.int64), np.array(parent, dtype=np.int64), np.array(lp)


@settings(max_examples=60, deadline=None)
@given(forest())
def test_sibling_rank_counts_the_siblings_ahead(f):
    # the definition: siblings with a higher log-prob, or an equal one and a lower node id
    start, n_nodes, parent, lp = f
    want = np.zeros(len(lp), dtype=np.int64)
    for s0, n in zip(start, n_nodes):
        for x in range(1, n):
            want[s0 + x] = sum(1 for y in range(1, n) if y != x and parent[s0 + y] == parent[s0 + x]
                               and (lp[s0 + y] > lp[s0 + x] or (lp[s0 + y] == lp[s0 + x] and y < x)))
    assert np.array_equal(_sibling_rank(start, n_nodes, parent, lp), want)


@pytest.mark.parametrize("seed,requests", [(0, 8), (1, 3), (2, 1)])
def test_each_row_is_valued_by_its_own_folds_model(write, seed, requests):
    # the one-pass prediction is AcceptanceModel.predict of the model fitted without the row's fold
    t = Trees(read_trace(write(tiny_trace(seed, requests=requests, positions=60))))
    lp = t.trace.nodes["draft_logprob"].astype(np.float64)
    rank, fold = sibling_rank(t), fold_of_rows(t)
    cond = (t.depth > 0) & t.accepted[t.parent_row]
    want = np.ones(t.n_rows)
    for f in np.unique(fold):
        train = cond & (fold != f) if requests > 1 else cond
        model = AcceptanceModel.fit(t.depth[train], rank[train], lp[train], t.accepted[train])
        rows = (t.depth > 0) & (fold == f)
        want[rows] = model.predict(t.depth[rows], rank[rows], lp[rows])
    cal = calibrate(t)
    assert np.array_equal(cal.conditional, want)
    assert cal.in_sample == (requests == 1)


@settings(max_examples=40, deadline=None)
@given(forest(), st.integers(0, 2**16))
def test_tree_sums_add_as_bincount_adds(f, seed):
    start, n_nodes, parent, _ = f
    depth = (parent >= 0).astype(np.int64)  # roots 0, the rest counted
    tree = np.repeat(np.arange(len(n_nodes)), n_nodes)
    value = np.random.default_rng(seed).random(len(parent))
    want = np.bincount(tree[depth > 0], value[depth > 0], len(n_nodes))
    assert np.array_equal(_tree_sums(value, depth, tree, len(n_nodes)), want)


def test_calibration_error_by_hand():
    ece, brier = calibration_error(np.array([0.2, 0.8]), np.array([0, 1]))
    assert ece == pytest.approx(0.2) and brier == pytest.approx(0.04)


def test_acceptance_table_shrinks_thin_cells_to_the_coarser_rate():
    # 10 rows at depth 1, rank 0, all accepted: the cell's rate is (10 + 10 p0) / 20 with p0 = 10.5/11
    d, r, lp = np.ones(10, dtype=np.int64), np.zeros(10, dtype=np.int64), np.zeros(10)
    m = AcceptanceModel.fit(d, r, lp, np.ones(10, dtype=bool))
    p0 = 10.5 / 11
    pd = (10 + 10 * p0) / 20
    assert m.predict(d[:1], r[:1], lp[:1])[0] == pytest.approx((10 + 10 * (10 + 10 * pd) / 20) / 20)


def test_union_scale_counts_new_experts_in_confidence_order_by_hand():
    from ecosim.union_scale import new_counts
    # one tree, one layer: root -> a -> b (cum log-probs 0, -0.1, -0.5)
    # true routing: root {0}, a {0}, b {1}   -> new: a 0, b 1
    # predicted:    root {0}, a {2}, b {3}   -> new: a 1, b 1
    true = np.array([[[0]], [[0]], [[1]]], dtype=np.int16)
    pred = np.array([[[0]], [[2]], [[3]]], dtype=np.int16)
    c = new_counts(np.array([0]), np.array([3]), np.array([0.0, -0.1, -0.5]), pred, true, 4, np.array([0]), 1, 4)
    assert c[0, 1].tolist() == [1.0, 0.0] and c[0, 2].tolist() == [1.0, 1.0] and c[0, 3].tolist() == [0.0, 0.0]
    # the order is confidence's, not the row order: b first (-0.05), then a
    c = new_counts(np.array([0]), np.array([3]), np.array([0.0, -0.5, -0.05]), pred, true, 4, np.array([0]), 1, 4)
    assert c[0, 1].tolist() == [1.0, 1.0] and c[0, 2].tolist() == [1.0, 0.0]


def test_union_scale_is_one_for_the_true_routing_and_below_for_a_scattering_prediction(write):
    from ecosim.union_scale import union_scale
    trace = read_trace(write(tiny_trace(5, requests=4, positions=40)))
    t = Trees(trace)
    beta, fold, in_sample = union_scale(t, trace.experts_3d())  # the routing itself: not counted
    assert not in_sample and (beta == 1.0).all() and fold.shape == (t.n_trees,)
    beta, _, _ = union_scale(t, trace.experts_3d().copy())  # an equal copy is counted, and comes out 1 too
    assert (beta == 1.0).all()
    # any other prediction: beta[f, k] is the true over predicted new experts of the other folds'
    # trees, pooled over the ranks k - k//4 .. k + k//4 (worked here from new_counts directly)
    from ecosim.acceptance import fold_of_rows
    from ecosim.union_scale import new_counts
    rng = np.random.default_rng(0)
    noisy = np.concatenate([trace.experts_3d(), rng.integers(0, TINY.num_experts, (*trace.experts_3d().shape[:2], 2),
                                                               dtype=np.int16)], axis=2)
    beta, fold, _ = union_scale(t, noisy)
    assert np.array_equal(fold, fold_of_rows(t)[t.start])
    ranks = int(t.n_nodes.max()) + 1
    per_tree = [new_counts(t.start[i:i + 1], t.n_nodes[i:i + 1], t.cum_logprob, noisy, trace.experts_3d(), TINY.num_experts,
                           np.zeros(1, dtype=np.int64), 1, ranks)[0] for i in range(t.n_trees)]
    for f in range(4):
        c = sum(x for x, g in zip(per_tree, fold) if g != f)
        for k in (1, 4, 8, ranks - 1):
            lo, hi = max(1, k - k // 4), min(ranks, k + k // 4 + 1)
            assert beta[f, k] == pytest.approx(c[lo:hi, 1].sum() / c[lo:hi, 0].sum())


def test_tree_rescale_fits_the_line_on_the_other_folds_by_hand(write):
    from ecosim.acceptance import fold_of_rows, rescale_trees
    trace = read_trace(write(tiny_trace(6, requests=4, positions=30)))
    t = Trees(trace)
    fold = fold_of_rows(t)
    A = t.accept_len.astype(float)
    # values whose tree sums say nothing about acceptance (b clips at 0): every tree is then worth
    # the mean observed accepted length of the other folds' trees
    rng = np.random.default_rng(1)
    value = np.where(t.depth > 0, rng.uniform(0.05, 0.5, t.n_rows), 1.0)
    v0 = np.bincount(t.tree_of_row[t.depth > 0], value[t.depth > 0], t.n_trees)
    v = value.copy()
    rescale_trees(t, v, fold, 4)
    got = np.bincount(t.tree_of_row[t.depth > 0], v[t.depth > 0], t.n_trees)
    tf = fold[t.start]
    for f in range(4):
        x, y = v0[tf != f], A[tf != f]
        b = max(0.0, np.polyfit(x, y, 1)[0])
        a = y.mean() - b * x.mean()
        assert np.allclose(got[tf == f], np.maximum(a + b * v0[tf == f], 0), rtol=1e-9)
    # values that are the acceptance itself are left as they are (a = 0, b = 1)
    exact = value.copy()
    exact[t.depth > 0] = 0.0
    first = t.start + 1  # put each tree's observed accepted length on its first child
    exact[first[t.n_nodes > 1]] = A[t.n_nodes > 1]
    keep = exact.copy()
    assert rescale_trees(t, exact, fold, 4) == pytest.approx(1.0)
    assert np.allclose(exact, keep)
