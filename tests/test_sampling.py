"""Verification at temperature > 0 (ecosim/sampling.py), as a spec: cases worked by hand, and losslessness
checked by enumerating every draw of the draft (the emitted token must be distributed exactly as the target's p)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecosim.sampling import (continue_sampled_chain, continue_target_only, expected_run, output_distribution,
                             rejection_accept, target_only_accept)

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.6, 0.3, 0.1])


def test_a_chain_of_one_accepts_with_min_1_p_over_q():
    for x in range(3):
        acc, _ = rejection_accept(P, Q, [x])
        assert acc[0] == pytest.approx(min(1.0, P[x] / Q[x]))


def test_a_three_node_tree_by_hand():
    """Root with children a (token 0) and b (token 1), drafted without replacement. a: min(1, 0.5/0.6) = 5/6.
    Rejected, the residual is norm(max(p - q, 0)) = (0, 0, 1) and q without token 0 is (0, 0.75, 0.25): b is
    accepted with min(1, 0/0.75) = 0. Expected accepted tokens 5/6 (tokens per step 1 + 5/6); target-only
    verification would accept p(0) + p(1) = 0.8."""
    acc, residual = rejection_accept(P, Q, [0, 1])
    assert acc == pytest.approx([5 / 6, 0.0])
    assert residual == pytest.approx([0.0, 0.0, 1.0])
    assert acc.sum() == pytest.approx(5 / 6)
    assert target_only_accept(P, [0, 1]).sum() == pytest.approx(0.8)


def test_continue_probabilities_and_the_expected_run_by_hand():
    assert continue_target_only([4, 7], 7) == 1.0 and continue_target_only([4, 7], 5) == 0.0
    assert continue_sampled_chain(0.5, 0.6) == 1.0 and continue_sampled_chain(0.5, 0.25) == 0.5
    assert continue_sampled_chain(0.0, 0.3) == 0.0
    assert expected_run([0.5, 0.5]) == pytest.approx(0.5 + 0.25)
    assert expected_run([1.0, 1.0, 0.0, 1.0]) == 2.0  # greedy: the run stops at the first mismatch


dists = st.lists(st.floats(0.01, 1.0), min_size=3, max_size=5).map(lambda w: np.array(w) / sum(w))


@given(dists, dists)
def test_speculative_sampling_of_one_draft_token_is_lossless(p, q):
    n = min(len(p), len(q))
    p, q = p[:n] / p[:n].sum(), q[:n] / q[:n].sum()
    out = sum(q[x] * output_distribution(p, q, [x]) for x in range(n))
    assert out == pytest.approx(p, abs=1e-9)
    # equation (2) averaged over the target's token is the acceptance rate sum min(p, q)
    assert sum(p[y] * continue_sampled_chain(p[y], q[y]) for y in range(n)) == pytest.approx(np.minimum(p, q).sum())


@given(dists, dists, st.booleans())
def test_recursive_rejection_sampling_of_two_children_is_lossless(p, q, replacement):
    n = min(len(p), len(q))
    p, q = p[:n] / p[:n].sum(), q[:n] / q[:n].sum()
    out = np.zeros(n)
    for a, b in itertools.product(range(n), repeat=2):
        if replacement:
            w = q[a] * q[b]
        else:
            if a == b:
                continue
            w = q[a] * q[b] / (1.0 - q[a])
        out += w * output_distribution(p, q, [a, b], replacement)
    assert out == pytest.approx(p, abs=1e-9)


def test_a_fixed_top_k_under_rejection_sampling_is_not_lossless_but_target_only_is():
    """Why trees of the draft's top-k children are verified target-only: with the children fixed (not drawn from
    q), rejection sampling emits token 0 with 5/6 instead of p(0) = 0.5."""
    assert output_distribution(P, Q, [0, 1])[0] == pytest.approx(5 / 6)
