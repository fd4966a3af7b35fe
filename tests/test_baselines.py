"""The baseline policies' choices worked by hand: EVICT keeps the most cost-effective prefix, the cascade turns
speculation off below unit utility, and the engine presets (EAGLE tree, vLLM chain) select what the engine
would verify on the hand-built trace; EVICT's profile on a few positions answers as one of every position.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT, hand_trace
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec, evict
from ecosim.policies.cascade import cascade_choice, utility
from ecosim.policies.evict import evict_prefix
from ecosim.policies.presets import chain, eagle_tree
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import find_traces, read_trace
from ecosim.tree import Trees


def test_evict_keeps_the_most_cost_effective_prefix():
    # values in confidence order 0.9, 0.5, 0.1; profiled step time 1, 1.2, 2, 3 s by nodes kept
    # rates: k=0 1/1 = 1, k=1 1.9/1.2 = 1.583, k=2 2.4/2 = 1.2, k=3 2.5/3 = 0.833 -> k = 1
    v = np.cumsum([[0.0, 0.9, 0.5, 0.1]], axis=1)
    assert evict_prefix(v, np.array([3]), np.array([1.0, 1.2, 2.0, 3.0]), 0.0)[0] == 1
    # the draft is paid whatever the cut (the tree was drafted before EVICT truncates it), so a
    # 10 s draft favours a longer prefix: 1/11 = 0.091, 1.9/11.2 = 0.170, 2.4/12 = 0.200, 2.5/13 = 0.192
    assert evict_prefix(v, np.array([3]), np.array([1.0, 1.2, 2.0, 3.0]), 10.0)[0] == 2
    # a tree of 1 candidate cannot take a second
    assert evict_prefix(np.cumsum([[0.0, 0.9, 0.5, 0.0]], axis=1), np.array([1]), np.array([1.0, 1.2, 1.0, 1.0]), 0.0)[0] == 1


def test_cascade_turns_speculation_off_below_unit_utility():
    # 2.5 tokens per step at 3 ms against a 1 ms plain step: utility 2.5 / 3 < 1 -> off
    assert utility(2.5, 3e-3, 1e-3) == pytest.approx(2.5 / 3)
    assert cascade_choice({1: utility(1.8, 1.5e-3, 1e-3), 2: utility(2.5, 3e-3, 1e-3)}) == 1  # 1.2 vs 0.83
    assert cascade_choice({1: 0.9, 2: 0.95}) == 0
    assert cascade_choice({}) == 0


def test_presets_select_what_the_engine_would_verify(write):
    t = Trees(read_trace(write(hand_trace())))
    # pos 0: n1 (q 0.6) and n2 (q 0.3) at depth 1, n3 (< n1, q 0.4) at depth 2
    # top-k 1: only the favourite child is drafted and expanded -> root, n1, n3 (total 3)
    assert list(np.flatnonzero(eagle_tree(t, 3, 2, 1))) == [0, 1, 3, 4, 5, 6, 7]
    # total 2 keeps the root and the best node by cumulative log-prob (n1: log 0.6)
    assert list(np.flatnonzero(eagle_tree(t, 2, 2, 2)[:4])) == [0, 1]
    # depth 1: nothing below depth 1 is drafted
    assert list(np.flatnonzero(eagle_tree(t, 60, 1, 10)[:4])) == [0, 1, 2]
    # vLLM's chain of 1 token: the favourite child only
    assert list(np.flatnonzero(chain(t, 1)[:4])) == [0, 1]


@pytest.mark.parametrize("placement", ["hbm", "ep:2"])
def test_evicts_profile_on_a_few_positions_answers_as_profiling_every_one(placement, monkeypatch):
    """C(k) is measured on PROFILE_STEPS positions, as an offline profile is: on every committed
    trace evict's time per token is within 1% of what a profile of every position gives."""
    for path in sorted(find_traces([str(ROOT / "traces")])):
        trace = read_trace(path)
        assert trace.n_trees > evict.PROFILE_STEPS  # a sample, not the whole trace
        cost = cost_model(trace, get_device("h200"), parse_placement(placement), CostConfig(), check=False)
        sampled = TraceReplay(trace).run(PolicySpec("evict"), cost)
        with monkeypatch.context() as m:
            m.setattr(evict, "profile_steps", lambda n: np.arange(n))
            every = TraceReplay(trace).run(PolicySpec("evict"), cost)
        assert sampled.time_s / sampled.tokens == pytest.approx(every.time_s / every.tokens, rel=0.01), path
