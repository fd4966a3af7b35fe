"""Work shared across configurations gives exactly what computing each one alone gives.

- the offload cache walked over a whole trajectory (`ExpertCache.walk`) equals step-by-step access;
- ecospec's pick order at a budget B gives the selection at every budget b <= B;
- the offsets of distinct ids (the fast path for the true routing) equal the general ones;
- a replay that shares steps and priced rows between identical selections returns the rows a
  fresh replay returns for each policy alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import tiny_trace
from ecosim import bitsets
from ecosim.cache import ExpertCache
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec, ecospec_offsets, ecospec_order, select_ecospec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import read_trace


@pytest.mark.parametrize("eviction", ["lru", "lfu"])
def test_walk_equals_access_step_by_step(eviction):
    rng = np.random.default_rng(0)
    for trial in range(60):
        layers, experts = int(rng.integers(1, 5)), int(rng.choice([4, 12, 64, 100, 256]))
        capacity = int(rng.integers(1, experts + 1))
        ids = rng.integers(-1, experts, size=(int(rng.integers(1, 40)), layers, int(rng.integers(1, 30)))).astype(np.int16)
        bits = bitsets.pack(ids, experts)
        step = ExpertCache(layers, experts, capacity, eviction)
        want = np.stack([step.access(b) for b in bits])
        got = ExpertCache(layers, experts, capacity, eviction).walk(bits)
        assert np.array_equal(got, want), trial
        # a layer never holds more than its capacity, and misses never exceed what is needed
        assert (want <= bitsets.count(bits)).all()


def test_one_ecospec_order_serves_every_smaller_budget(write):
    trace = read_trace(write(tiny_trace(3, requests=3, positions=30, max_nodes=16, depth=5)))
    r = TraceReplay(trace)
    m, predicted = trace.model, trace.experts_3d()
    for lam, score in [(0.0, "difference"), (0.3, "difference"), (2.0, "difference"), (0.5, "ratio")]:
        order = ecospec_order(r.trees, 12, lam, predicted, m.num_experts, m.top_k, score)
        for b in (0, 1, 3, 7, 12):
            want = select_ecospec(r.trees, b, lam, predicted, m.num_experts, m.top_k, score)
            assert np.array_equal((r.trees.depth == 0) | (order < b), want), (lam, score, b)


def test_distinct_offsets_equal_the_general_ones():
    rng = np.random.default_rng(1)
    for experts, layers, k in [(256, 5, 8), (16, 3, 4), (4, 2, 2)]:
        ids = np.argsort(rng.random((300, layers, experts)), axis=2)[:, :, :k].astype(np.int16)
        ids[rng.random(ids.shape) < 0.2] = -1  # pads
        assert np.array_equal(ecospec_offsets(ids, experts, distinct=True), ecospec_offsets(ids, experts))


@pytest.mark.parametrize("placement", ["hbm", "ep:4", "offload:3", "offload:5:lfu"])
def test_shared_replay_returns_what_each_policy_alone_returns(write, placement):
    path = write(tiny_trace(4, requests=3, positions=25, max_nodes=12))
    specs = [PolicySpec("ecospec", b, lam, "oracle") for lam in (0.0, 0.2, 3.0) for b in (8, 4, 2)]
    specs += [PolicySpec("confidence", 4), PolicySpec("ar"), PolicySpec("ecospec", 0, 1.0, "oracle")]
    shared = TraceReplay(read_trace(path))
    for bw in (2e12, 4.8e12):
        cost = cost_model(shared.trace, get_device("h200").replace(hbm_bw=bw), parse_placement(placement), CostConfig())
        for spec in specs:
            alone = TraceReplay(read_trace(path))
            assert shared.run(spec, cost) == alone.run(spec, cost), spec
    # identical selections share one walk: at lambda 3 every budget keeps the same few nodes
    big = [PolicySpec("ecospec", b, 3.0, "oracle") for b in (8, 4, 2)]
    if len({shared.digest(s) for s in big}) == 1:
        assert shared.steps(big[0]) is shared.steps(big[1]) is shared.steps(big[2])


def test_forget_keeps_the_trace_work_and_drops_the_rest(write):
    r = TraceReplay(read_trace(write(tiny_trace(5))))
    cost = cost_model(r.trace, get_device("h200"), parse_placement("offload:3"), CostConfig())
    spec = PolicySpec("ecospec", 6, 0.2, "oracle")
    first = r.run(spec, cost)
    kept = dict(r.memo.kinds["trace"])
    assert ("predicted", "oracle") in kept  # (ecospec's buffer offsets are not: recomputed per chunk, for memory)
    r.forget()
    assert not r.memo.size("rows", "orders", "steps", "misses", "digests", "masks")
    assert r.memo.kinds["trace"] == kept
    assert r.run(spec, cost) == first
    assert all(r.memo.kinds["trace"][k] is v for k, v in kept.items())  # nothing per trace was redone


def test_confidence_rank_table_and_sort_paths_agree(write):
    from ecosim.policies import confidence_rank, rank_by_sorts
    from ecosim.tree import Trees

    for seed in range(4):
        trees = Trees(read_trace(write(tiny_trace(seed, requests=3, positions=30, max_nodes=16, depth=5))))
        assert np.array_equal(confidence_rank(trees), rank_by_sorts(trees)), seed


@pytest.mark.parametrize("placement", ["hbm", "ep:2", "offload:4"])
def test_request_totals_sum_to_what_run_totals(write, placement):
    trace = read_trace(write(tiny_trace(8, requests=3, positions=30)))
    r = TraceReplay(trace)
    cost = cost_model(trace, get_device("h200"), parse_placement(placement), CostConfig())
    for spec in (PolicySpec("ar"), PolicySpec("confidence", 4), PolicySpec("ecospec-auto", predictor="oracle"),
                 PolicySpec("oracle")):
        sec, tok = r.request_totals(spec, cost)
        row = r.run(spec, cost)
        assert len(sec) == len(tok) == 3
        assert sec.sum() == pytest.approx(row.time_s, rel=1e-12) and tok.sum() == row.tokens
