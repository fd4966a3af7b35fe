"""The marginal time of a node (what adding it to a step's selection costs, in seconds), by hand: on one device,
under tp:2 (half of each new expert per device), under ep:2 (what the straggler group adds) and with uneven
expert-parallel blocks (the placement says which group holds an expert), and against the cost model's step time.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY
from ecosim import bitsets
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig, CostModel
from ecosim.marginal import StepPricer
from ecosim.catalog.drafts import DraftCost
from ecosim.placements import Hbm, parse_placement


def test_marginal_time_by_hand_and_against_the_cost_model():
    cost = CostModel(TINY, get_device("h200").replace(hbm_bw=1e9), Hbm(), CostConfig(mode="experts-only"))
    p = StepPricer.of(cost, 4)
    layers, e = TINY.num_moe_layers, TINY.num_experts
    chosen = np.zeros((layers, e), dtype=bool)
    chosen[:, [0, 1]] = True
    node = np.zeros((layers, e), dtype=bool)
    node[0, [1, 2, 3]] = True  # 2 new experts in layer 0: 2 x 1 MB / 1 GB/s
    assert p.marginal_time(chosen, 1, node, 10) == pytest.approx(2e-3)
    # full cost, ep:2: the step time of a selection equals CostModel.step_times on the same union
    full = CostModel(TINY, get_device("h200"), parse_placement("ep:2"), CostConfig(), tree_depth=3, draft=DraftCost("model", 1e6, 2, False))
    q = StepPricer.of(full, 6)
    per_device = np.array([[2, 1], [0, 3], [4, 4]])
    want = full.step_times(per_device[None], np.array([5]), np.array([100]), speculative=True)[0]
    assert q.step_time(per_device, 5, 100) == pytest.approx(want, rel=1e-12)


def _experts(layers: int, e: int, per_layer: dict[int, list[int]]) -> np.ndarray:
    out = np.zeros((layers, e), dtype=bool)
    for l, ids in per_layer.items():
        out[l, ids] = True
    return out


def test_marginal_time_under_tp2_reads_half_of_each_new_expert():
    """tp:2, experts only, 1 MB experts at 1 GB/s: each device reads 0.5 MB of each new expert."""
    cost = CostModel(TINY, get_device("h200").replace(hbm_bw=1e9), parse_placement("tp:2"), CostConfig(mode="experts-only"))
    p = StepPricer.of(cost, 4)
    chosen = _experts(3, 8, {0: [0, 1], 1: [0, 1], 2: [0, 1]})
    node = _experts(3, 8, {0: [1, 2, 3]})  # 2 new experts: 2 x 0.5 MB / 1 GB/s
    assert p.groups == 1 and p.marginal_time(chosen, 1, node, 10) == pytest.approx(1e-3)
    # full cost: the all-reduces and the other per-token terms are the same for every node, so two
    # nodes differ by their new experts' halves at the effective bandwidth (TINY's compute is negligible)
    full = CostModel(TINY, get_device("h200"), parse_placement("tp:2"), CostConfig(), tree_depth=3,
                     draft=DraftCost("model", 1e6, 2, False))
    q = StepPricer.of(full, 4)
    assert full.collective_time(np.array([3]))[0] > 0  # the all-reduce is there, and does not depend on the node
    none_new = q.marginal_time(chosen, 2, _experts(3, 8, {0: [0]}), 10)
    two_new = q.marginal_time(chosen, 2, node, 10)
    assert two_new - none_new == pytest.approx(2 * 0.5e6 / full.bw, rel=1e-9)


def test_marginal_time_under_ep2_is_what_the_straggler_adds():
    """ep:2 of 8 experts (group 0 holds 0-3, group 1 holds 4-7), experts only, 1 ms per expert read."""
    cost = CostModel(TINY, get_device("h200").replace(hbm_bw=1e9), parse_placement("ep:2"), CostConfig(mode="experts-only"))
    p = StepPricer.of(cost, 4)
    chosen = _experts(3, 8, {0: [0, 1, 2], 1: [4]})  # per group: layer 0 (3, 0), layer 1 (0, 1), layer 2 (0, 0)
    node = _experts(3, 8, {0: [5, 6], 1: [0, 5], 2: [3]})
    # layer 0: group 1 goes 0 -> 2, still under the straggler's 3: free; layer 1: max 1 -> 2: 1 ms;
    # layer 2: max 0 -> 1: 1 ms. On one device the same node reads 2 + 2 + 1 new experts: 5 ms.
    assert p.groups == 2 and p.marginal_time(chosen, 1, node, 10) == pytest.approx(2e-3)
    hbm = StepPricer.of(CostModel(TINY, get_device("h200").replace(hbm_bw=1e9), Hbm(), CostConfig(mode="experts-only")), 4)
    assert hbm.marginal_time(chosen, 1, node, 10) == pytest.approx(5e-3)


def test_marginal_time_asks_the_placement_which_group_holds_an_expert():
    """ep:5 of 8 experts: the placement's blocks are 2, 2, 2, 1, 1, so experts 6 and 7 sit on two
    groups and a node reading both waits for one expert, as the replay prices the same union."""
    cost = CostModel(TINY, get_device("h200").replace(hbm_bw=1e9), parse_placement("ep:5"), CostConfig(mode="experts-only"))
    p = StepPricer.of(cost, 4)
    node = _experts(3, 8, {0: [6, 7]})
    assert p.marginal_time(np.zeros((3, 8), dtype=bool), 1, node, 10) == pytest.approx(1e-3)
    union = cost.placement.union_per_group(bitsets.pack(np.array([[[6, 7], [-1, -1], [-1, -1]]]), 8), 8)
    assert cost.step_times(union, np.array([2]), np.array([10]), speculative=True)[0] == pytest.approx(1e-3)
