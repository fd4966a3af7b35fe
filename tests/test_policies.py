"""The simulator's policies, oracle and engines, as a spec: a case worked by hand, then properties.

Hand case (conftest.hand_trace), experts-only cost at 1 GB/s with 1 MB experts: each distinct
expert per layer costs exactly 1 ms, so a step's time is its union size summed over layers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import TINY, hand_trace, tiny_trace
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig, CostModel
from ecosim.des import DesConfig, des_run
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.synth import SynthConfig, synthesize
from ecosim.trace.io import read_trace, write_trace

MS = 1e-3


@pytest.fixture
def hand(write):
    return TraceReplay(read_trace(write(hand_trace())))


def experts_only(replay: TraceReplay, bw: float = 1e9, placement: str = "hbm") -> CostModel:
    device = get_device("h200").replace(hbm_bw=bw)
    return cost_model(replay.trace, device, parse_placement(placement), CostConfig(mode="experts-only"))


def summary(replay: TraceReplay, spec: PolicySpec, placement: str = "hbm") -> tuple[int, int, int, float]:
    row = replay.run(spec, experts_only(replay, placement=placement))
    return row.tokens, row.steps, row.expert_loads, round(row.time_s / MS, 9)


def test_hand_ar(hand):
    # Three root-only steps, each reading 2 experts in each of 2 layers: 4 ms apiece.
    assert summary(hand, PolicySpec("ar")) == (3, 3, 12, 12.0)


def test_hand_confidence(hand):
    # pos 0 takes n1 (0.6) and n2 (0.3) over n3 (0.24): accepts n1, union 4+4 -> 8 ms, 2 tokens.
    # pos 2 takes its only child: union [0,2,3,1] | [2,3,0] -> 4+3 = 7 ms; cut at the end: 1 token.
    assert summary(hand, PolicySpec("confidence", budget=2)) == (3, 2, 15, 15.0)


def test_hand_ecospec_stops_when_nothing_is_worth_its_cost(hand):
    # lambda 1: pos 0 scores n1 0.6 - 1*2/4 = 0.1 and n2 0.3 - 0.5 < 0: takes n1; then n3 scores
    # 0.24 - 1/4 < 0: stops. 6 ms, 2 tokens. pos 2: n1 scores 0.5 - 3/4 < 0: root only, 4 ms.
    assert summary(hand, PolicySpec("ecospec", 2, 1.0, "oracle")) == (3, 2, 10, 10.0)


def test_hand_ecospec_finds_the_deep_chain(hand):
    # lambda 0.5: n1 0.35 beats n2 0.05; then n3 0.24 - 0.125 beats n2: {root, n1, n3} accepts both,
    # all 3 tokens in one step over L0 {0,1,2} + L1 {0,1,2,3} = 7 ms.
    assert summary(hand, PolicySpec("ecospec", 2, 0.5, "oracle")) == (3, 1, 7, 7.0)


def test_hand_ecospec_small_lambda_is_confidence(hand):
    assert summary(hand, PolicySpec("ecospec", 2, 0.2, "oracle")) == summary(hand, PolicySpec("confidence", 2))


def test_hand_oracle(hand):
    # T(2) = 4 (only the root fits before the end); T(1) = min(4 + 4, 5) = 5;
    # T(0) = min(4 + T(1), 6 + T(2), 7) = 7: the whole chain at once.
    assert summary(hand, PolicySpec("oracle")) == (3, 1, 7, 7.0)


def test_hand_expert_parallel_takes_the_slowest_device(hand):
    # ep:2: device 0 holds experts {0,1}, device 1 {2,3}. ar at pos 0 reads L0 {0,1} (2 | 0) and
    # L1 {0,1} (2 | 0): 2 + 2 ms; pos 1: L0 {0,1} 2, L1 {2,3} 2 -> 4; pos 2: L0 {0,2} (1 | 1), L1 {2,3} (0 | 2) -> 3.
    assert summary(hand, PolicySpec("ar"), "ep:2") == (3, 3, 12, 11.0)


def test_hand_offload_counts_misses_along_the_trajectory(write):
    replay = TraceReplay(read_trace(write(hand_trace())))
    device = get_device("h200").replace(hbm_bw=1e9, pcie_bw=0.5e9)
    cost = cost_model(replay.trace, device, parse_placement("offload:2"), CostConfig(mode="experts-only"))
    # ar: pos 0 misses all 4 (cold), pos 1 misses L1 {2,3} (2), pos 2 misses L0 {2} (1): 7 misses
    # at 2 ms each over PCIe plus 12 ms of HBM reads.
    row = replay.run(PolicySpec("ar"), cost)
    assert row.pcie_bytes == 7e6
    assert row.time_s == pytest.approx(12 * MS + 7 * 2 * MS, rel=1e-12)


def test_ar_reads_top_k_per_layer_and_yields_one_token_per_step(write):
    replay = TraceReplay(read_trace(write(tiny_trace(3))))
    row = replay.run(PolicySpec("ar"), cost_model(replay.trace, get_device("h100"), parse_placement("hbm"), CostConfig()))
    assert row.tokens_per_step == 1.0
    assert row.experts_per_step == TINY.num_moe_layers * TINY.top_k


random_traces = st.builds(
    dict,
    seed=st.integers(0, 10_000),
    depth=st.integers(1, 5),
    topk=st.integers(1, 4),
    max_nodes=st.integers(1, 20),
    accept=st.floats(0.0, 1.0),
    positions=st.integers(1, 30),
    token_affinity=st.floats(0, 0.5),
)


def _replay(params: dict) -> TraceReplay:
    """A replay of a trace written to disk and read back (the whole trace is in memory after
    read_trace, so the directory goes as soon as it is read: one per hypothesis example)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return TraceReplay(read_trace(write_trace(f"{d}/t", *tiny_trace(**params))))


@given(random_traces, st.integers(0, 24), st.floats(0, 3), st.sampled_from(["hbm", "ep:4", "offload:3"]))
def test_no_policy_beats_the_oracle(params, budget, lam, placement):
    replay = _replay(params)
    cost = cost_model(replay.trace, get_device("h200"), parse_placement(placement), CostConfig())
    bound = replay.run(PolicySpec("oracle"), cost).time_s
    for spec in (PolicySpec("ar"), PolicySpec("confidence", budget), PolicySpec("ecospec", budget, lam, "oracle"),
                 PolicySpec("ecospec", budget, lam, "none", "ratio")):
        assert replay.run(spec, cost).time_s >= bound * (1 - 1e-12)


@given(random_traces, st.integers(0, 24), st.sampled_from(["oracle", "none"]))
def test_ecospec_at_lambda_zero_selects_what_confidence_selects(params, budget, predictor):
    replay = _replay(params)
    for score in ("difference", "ratio"):
        a = replay.selection(PolicySpec("ecospec", budget, 0.0, predictor, score))
        assert np.array_equal(a, replay.selection(PolicySpec("confidence", budget)))


@given(random_traces)
def test_confidence_accepted_length_grows_with_budget_at_every_position(params):
    replay = _replay(params)
    t = replay.trees
    previous = np.zeros(t.n_trees, dtype=np.int64)
    for budget in range(0, 22, 3):
        sel = replay.selection(PolicySpec("confidence", budget))
        assert (t.selected_count(sel) <= budget + 1).all()
        assert sel[t.parent_row[sel]].all()  # ancestor-closed
        accept = t.selected_accept_len(sel)
        assert (accept >= previous).all()
        previous = accept


@given(random_traces, st.floats(0, 2), st.integers(0, 20))
def test_selections_are_ancestor_closed_subtrees_within_budget(params, lam, budget):
    replay = _replay(params)
    t = replay.trees
    sel = replay.selection(PolicySpec("ecospec", budget, lam, "oracle"))
    assert sel[t.depth == 0].all()
    assert sel[t.parent_row[sel]].all()
    assert (t.selected_count(sel) <= budget + 1).all()


@given(random_traces, st.sampled_from(["ar", "confidence", "ecospec", "oracle"]), st.sampled_from(["hbm", "ep:8", "tp:8", "tp:4+ep:2", "offload:4"]))
def test_more_bandwidth_never_takes_longer(params, name, placement):
    replay = _replay(params)
    times = []
    for bw in (1e12, 2e12, 4e12):
        cost = cost_model(replay.trace, get_device("h200").replace(hbm_bw=bw), parse_placement(placement), CostConfig())
        times.append(replay.run(PolicySpec(name, 8, 0.3, "oracle"), cost).time_s)
    assert times[0] >= times[1] >= times[2]


@given(random_traces, st.sampled_from(["ar", "confidence", "ecospec"]), st.sampled_from(["hbm", "ep:4", "tp:2", "tp:2+ep:2", "offload:5"]),
       st.sampled_from(["full", "experts-only"]))
def test_engines_agree_without_contention(params, name, placement, mode):
    replay = _replay(params)
    cost = cost_model(replay.trace, get_device("b200"), parse_placement(placement), CostConfig(mode=mode))
    spec = PolicySpec(name, 10, 0.4, "oracle")
    fast = replay.run(spec, cost)
    des = des_run(replay, spec, cost, DesConfig()).row
    assert des.time_s == pytest.approx(fast.time_s, rel=1e-9)
    assert (des.steps, des.tokens, des.expert_loads, des.pcie_bytes) == (fast.steps, fast.tokens, fast.expert_loads, fast.pcie_bytes)


def test_batching_requests_shares_expert_reads(write):
    replay = TraceReplay(read_trace(write(tiny_trace(5, requests=4))))
    cost = cost_model(replay.trace, get_device("h200"), parse_placement("hbm"), CostConfig())
    spec = PolicySpec("confidence", 8)
    alone = des_run(replay, spec, cost, DesConfig())
    together = des_run(replay, spec, cost, DesConfig("together", max_batch=4))
    assert together.row.tokens == alone.row.tokens
    assert together.row.steps == alone.row.steps  # steps are counted per request (metrics.py)
    assert together.forwards < alone.forwards == alone.row.steps
    assert together.row.time_s < alone.row.time_s


def test_ar_yields_one_token_per_step_however_it_is_batched(write):
    """A batched run of `ar` once showed 1.349 tokens/step (steps were counted per forward)."""
    replay = TraceReplay(read_trace(write(tiny_trace(5, requests=4))))
    cost = cost_model(replay.trace, get_device("h200"), parse_placement("hbm"), CostConfig())
    for cfg in (DesConfig(), DesConfig("together", max_batch=4), DesConfig("poisson:1000", max_batch=3)):
        r = des_run(replay, PolicySpec("ar"), cost, cfg)
        assert r.row.tokens_per_step == 1.0 and r.row.steps == r.row.tokens


def test_serving_metrics_of_the_event_engine(write):
    replay = TraceReplay(read_trace(write(tiny_trace(8, requests=3, positions=12))))
    cost = cost_model(replay.trace, get_device("h200"), parse_placement("hbm"), CostConfig())
    spec = PolicySpec("confidence", 6)
    steps = replay.steps(spec)
    r = des_run(replay, spec, cost, DesConfig("together", max_batch=3))
    s = r.serving()
    first_tokens = sum(int(steps.tokens[np.flatnonzero(steps.request == q)[0]]) for q in np.unique(steps.request))
    assert len(r.inter_token_s) == r.row.tokens - first_tokens  # one sample per token after a request's first step
    for key in ("inter_token_latency_s", "first_step_latency_s", "request_latency_s"):
        p = s[key]
        assert 0 < p["p50"] <= p["p90"] <= p["p99"]
    assert s["throughput_tokens_per_s"] == pytest.approx(r.row.tokens / r.makespan_s)
    assert s["throughput_requests_per_s"] == pytest.approx(3 / r.makespan_s)
    assert s["ttft_s"].startswith("not modelled")
    # one request at a time, one forward per step: each token's ITL is its step's time over its tokens
    alone = des_run(replay, PolicySpec("ar"), cost, DesConfig())
    assert alone.forwards == alone.row.steps
    assert sum(alone.inter_token_s) + sum(alone.first_step_s) == pytest.approx(alone.row.time_s, rel=1e-12)


def test_budget_zero_is_ar_exactly(write):
    """Nothing drafted, nothing charged: confidence and ecospec at budget 0 cost what ar costs."""
    replay = TraceReplay(read_trace(write(tiny_trace(9, requests=2))))
    for placement in ("hbm", "offload:3", "ep:2"):
        cost = cost_model(replay.trace, get_device("h200"), parse_placement(placement), CostConfig())
        ar = replay.run(PolicySpec("ar"), cost)
        for spec in (PolicySpec("confidence", 0), PolicySpec("ecospec", 0, 0.5, "oracle")):
            row = replay.run(spec, cost)
            assert (row.time_s, row.steps, row.tokens, row.expert_loads) == (ar.time_s, ar.steps, ar.tokens, ar.expert_loads)
            assert des_run(replay, spec, cost).row.time_s == des_run(replay, PolicySpec("ar"), cost).row.time_s


def test_prefetch_overlaps_copies_with_compute(write):
    replay = TraceReplay(read_trace(write(tiny_trace(6))))
    cost = cost_model(replay.trace, get_device("h200"), parse_placement("offload:2"), CostConfig())
    spec = PolicySpec("confidence", 8)
    plain = des_run(replay, spec, cost, DesConfig()).row.time_s
    ahead = des_run(replay, spec, cost, DesConfig(prefetch=True)).row.time_s
    assert ahead < plain


def test_experts_only_is_union_times_bytes_over_bandwidth(write):
    replay = TraceReplay(read_trace(write(tiny_trace(7))))
    device = get_device("h200").replace(hbm_bw=2e12)
    cost = cost_model(replay.trace, device, parse_placement("hbm"), CostConfig(mode="experts-only"))
    row = replay.run(PolicySpec("confidence", 6), cost)
    assert row.time_s == pytest.approx(row.expert_loads * TINY.expert_bytes / 2e12, rel=1e-12)


def test_trees_accept_the_chain_the_target_follows(write):
    replay = TraceReplay(read_trace(write(hand_trace())))
    assert replay.trees.accept_len.tolist() == [2, 1, 1]
    assert replay.trees.chain.tolist() == [[0, 1, 3], [4, 5, -1], [6, 7, -1]]
