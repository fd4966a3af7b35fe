"""The `token` table's compiled fit and top-k sets give exactly what the dense numpy definitions give,
and the compiled pairwise sum they rank with is numpy's.

The references below are the definitions written out over a dense (tokens x layers x experts)
block: bincount every token's slots, keep the `width` most counted (`top_ids`), score every
expert (token.py's formula, normalised over the layer) and take the top k. Random tables with
few distinct counts and a coarse prior make ties common, where an approximate kernel would differ.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numba import njit

from ecosim.pairwise import pairwise, pairwise_plan
from ecosim.predictors.base import top_ids
from ecosim.predictors.freq import expert_prior
from ecosim.predictors.token import TokenTable


def dense_fit(token: np.ndarray, experts: np.ndarray, E: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    uniq, inv = np.unique(token.astype(np.int64), return_inverse=True)
    _, L, _ = experts.shape
    flat = (inv[:, None, None] * (L * E) + np.arange(L)[None, :, None] * E + experts)[experts >= 0]
    block = np.bincount(flat, minlength=len(uniq) * L * E).reshape(len(uniq), L, E).astype(np.float32)
    top = top_ids(block, min(width, E))
    return uniq, top.astype(np.int16), np.take_along_axis(block, top, axis=-1)


def dense_prior(experts: np.ndarray, E: int) -> np.ndarray:
    L = experts.shape[1]
    counts = np.zeros((L, E))
    for layer in range(L):
        e = experts[:, layer, :].ravel()
        counts[layer] = np.bincount(e[e >= 0], minlength=E)[:E]
    total = counts.sum(axis=1, keepdims=True)
    return np.where(total > 0, counts / np.maximum(total, 1), 1.0 / E)


def routing(seed: int, rows: int, L: int, E: int, k: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    hot = max(k, E // 3)  # a few hot experts per layer: repeated counts, ties
    experts = np.stack([np.stack([rng.choice(hot if rng.random() < 0.7 else E, size=k, replace=False) for _ in range(L)])
                        for _ in range(rows)]).astype(np.int16)
    experts[rng.random((rows, L, k)) < 0.05] = -1  # pads
    return rng.integers(0, vocab, size=rows), experts


shapes = st.tuples(st.integers(0, 10_000), st.integers(1, 120), st.integers(1, 4), st.sampled_from([4, 8, 16, 33, 64, 160]),
                   st.integers(1, 4), st.integers(1, 40))


@settings(deadline=None, max_examples=60)
@given(shapes, st.integers(1, 20), st.sampled_from([0.25, 1.0, 3.0]))
def test_fit_and_top_k_equal_the_dense_definitions(shape: tuple[int, ...], width: int, alpha: float) -> None:
    seed, rows, L, E, k, vocab = shape
    k = min(k, E)
    token, experts = routing(seed, rows, L, E, k, vocab)
    table = TokenTable.fit(token, experts, E, width, alpha)
    uniq, ids, counts = dense_fit(token, experts, E, width)
    assert np.array_equal(table.tokens, uniq)
    assert np.array_equal(table.ids, ids) and np.array_equal(table.counts, counts)
    assert np.array_equal(table.prior, dense_prior(experts, E).astype(np.float32))
    every = np.arange(-1, len(table.tokens))
    for pick in {1, k, min(E, 2 * k + 1), E}:
        assert np.array_equal(table.top_k_ids(every, pick), top_ids(table.scores_of(every), pick).astype(np.int16)), pick
        lean, picked = TokenTable.fit_top_k(token, experts, E, width, alpha, pick, block=3)  # a block at a time
        assert np.array_equal(picked, table.top_k_ids(every, pick)) and len(lean.ids) == 0
        assert np.array_equal(lean.tokens, table.tokens) and np.array_equal(lean.prior, table.prior)


@settings(deadline=None, max_examples=40)
@given(shapes, st.integers(1, 20), st.integers(0, 2**16))
def test_labels_read_in_place_fit_what_their_copy_fits(shape: tuple[int, ...], width: int, pick_seed: int) -> None:
    """The k-fold fits read the other folds' labels where they lie (`rows` of the trace's routing):
    the same table, sets and prior as fitting a copy of those rows."""
    seed, n, L, E, k, vocab = shape
    k = min(k, E)
    token, experts = routing(seed, n, L, E, k, vocab)
    rows = np.sort(np.random.default_rng(pick_seed).permutation(n)[: max(1, n // 2)])
    copied = TokenTable.fit(token[rows], experts[rows], E, width, 1.0)
    in_place = TokenTable.fit(token[rows], experts, E, width, 1.0, rows=rows)
    for name in ("tokens", "n", "ids", "counts", "prior"):
        assert np.array_equal(getattr(in_place, name), getattr(copied, name)), name
    _, want = TokenTable.fit_top_k(token[rows], experts[rows], E, width, 1.0, k, block=3)
    lean, got = TokenTable.fit_top_k(token[rows], experts, E, width, 1.0, k, block=3, rows=rows)
    assert np.array_equal(got, want) and np.array_equal(lean.prior, copied.prior)
    assert np.array_equal(expert_prior(experts, E, rows), expert_prior(experts[rows], E))


def test_top_k_breaks_exact_ties_to_the_lower_id() -> None:
    """A uniform prior and one counted expert: every other expert ties, the lowest ids fill the set."""
    token = np.zeros(3, dtype=np.int64)
    experts = np.full((3, 1, 1), 5, dtype=np.int16)
    table = TokenTable.fit(token, experts, 8, 2, 1.0)
    table.prior[:] = np.float32(1 / 8)
    assert table.top_k_ids(np.array([0, -1]), 3).tolist() == [[[5, 0, 1]], [[0, 1, 2]]]


def test_normalising_may_merge_neighbours_into_a_tie_that_the_lower_id_wins() -> None:
    """Expert 5's prior is the float just above expert 2's; divided by the layer's sum (1.148) both
    round to one score, so expert 2 (the lower id) is the top-1, not the expert of higher prior."""
    table = TokenTable.fit(np.zeros(1, dtype=np.int64), np.zeros((1, 1, 1), dtype=np.int16), 8, 1, 1.0)
    table.prior[0] = np.array([0.06565108895301819, 0.01358273345977068, 0.30000001192092896, 0.16198766231536865,
                               0.08615604043006897, 0.30000004172325134, 0.03969665989279747, 0.18115100264549255],
                              dtype=np.float32)
    unseen = np.array([-1])
    assert table.prior[0, 5] > table.prior[0, 2]
    assert top_ids(table.scores_of(unseen), 1).tolist() == [[[2]]]
    assert table.top_k_ids(unseen, 1).tolist() == [[[2]]]
    assert table.top_k_ids(unseen, 2).tolist() == [[[2, 5]]]


@njit
def _row_sums(x, plan):
    stack = np.empty(plan.shape[0] + 1, dtype=x.dtype)
    out = np.empty(x.shape[0], dtype=x.dtype)
    for r in range(x.shape[0]):
        out[r] = pairwise(x[r], 0, plan, stack)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_pairwise_sum_is_numpys(dtype: type) -> None:
    """Every length up to 300 and a few long ones, values spread over orders of magnitude (where
    the order of additions shows in the last bits)."""
    rng = np.random.default_rng(0)
    for n in [*range(1, 301), 383, 1000, 4099]:
        x = (rng.random((50, n)) ** 6 * 10.0 ** rng.integers(-3, 4, size=(50, n))).astype(dtype)
        assert np.array_equal(_row_sums(x, pairwise_plan(n)), x.sum(axis=-1)), n
