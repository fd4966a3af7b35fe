"""The fast paths give what the direct computations give, bit for bit.

Each optimised computation keeps its direct (slow, obvious) form here as the reference: evict's
profile re-selecting and re-packing at every budget, a replay with nothing kept between calls.
Compared on synthetic traces of several sizes and seeds, under several placements, and on the
committed traces.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, TINY, tiny_trace
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig, CostModel
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.policies.confidence import confidence_rank, select_confidence
from ecosim.policies.evict import PROFILE_STEPS, profile_steps, profiled_cost, union_counts
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.synth import SynthConfig, synthesize
from ecosim.trace.io import find_traces, read_trace
from ecosim.tree import Trees

PLACEMENTS = ("hbm", "tp:2", "ep:2", "tp:2+ep:2", "offload:4")
COMMITTED = sorted(find_traces([str(ROOT / "traces")]))


def profiled_cost_reference(trees: Trees, rank: np.ndarray, cost: CostModel, max_budget: int,
                            pick: np.ndarray | None = None) -> np.ndarray:
    """evict's C(k) as it reads: select `confidence` at every budget k, pack and price it whole, and
    average the picked trees' times."""
    ctx = trees.trace.positions["context_len"].astype(np.int64)
    out = np.zeros(max_budget + 1)
    for k in range(max_budget + 1):
        sel = select_confidence(trees, k, rank=rank)
        n = trees.selected_count(sel)
        times = cost.layer_times(union_counts(trees, sel, cost), n).sum(axis=1) + cost.other_times(n, ctx, speculative=False)
        out[k] = float((times if pick is None else times[pick]).mean())
    return out


def _costs(trace, placements=PLACEMENTS):
    for p in placements:
        yield p, cost_model(trace, get_device("h200"), parse_placement(p), CostConfig(), check=False)


@pytest.mark.parametrize("seed,overrides", [(0, {}), (1, {"max_nodes": 30, "depth": 6, "topk": 4}),
                                            (2, {"requests": 3, "positions": 25, "max_nodes": 5}),
                                            (3, {"requests": 2, "positions": 150, "max_nodes": 12})])  # > 128 trees: pairwise means
def test_evict_profile_grown_budget_by_budget_is_the_direct_one_bit_for_bit(write, seed, overrides):
    trace = read_trace(write(tiny_trace(seed, **overrides)))
    t = Trees(trace)
    rank = confidence_rank(t)
    kmax = int(t.n_nodes.max()) - 1
    for _, cost in _costs(trace):
        want = profiled_cost_reference(t, rank, cost, kmax)
        assert np.array_equal(profiled_cost(t, rank, cost, kmax), want)
        assert np.array_equal(profiled_cost(t, rank, cost, 3), want[:4])  # a smaller budget: its prefix


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 3), st.integers(2, 30), st.integers(1, 7), st.integers(1, 5),
       st.integers(1, 40), st.sampled_from(PLACEMENTS), st.integers(0, 45), st.sampled_from([3, 9, 58]),
       st.integers(1, 100))
def test_evict_profile_is_the_direct_one_on_random_trees(seed, requests, positions, depth, topk, max_nodes, placement, budget,
                                                         layers, steps):
    """Random tree shapes (a single node to wide and deep), any placement, any largest budget
    (beyond the largest tree too), few MoE layers or many (where numpy sums a step's layers
    pairwise, not one by one), profiled on some of the positions or all: the walk in rank order
    gives the per-budget pass's floats."""
    from ecosim.trace.io import write_trace

    shape = replace(TINY, num_layers=layers, moe_layers=tuple(range(layers)))
    parts = synthesize(shape, SynthConfig(requests=requests, positions=positions, depth=depth, topk=topk,
                                          max_nodes=max_nodes, seed=seed))
    with tempfile.TemporaryDirectory() as d:
        trace = read_trace(write_trace(Path(d) / "t", *parts))
        t = Trees(trace)
        rank = confidence_rank(t)
        [(_, cost)] = _costs(trace, (placement,))
        pick = profile_steps(t.n_trees, steps)
        assert np.array_equal(profiled_cost(t, rank, cost, budget, pick), profiled_cost_reference(t, rank, cost, budget, pick))


@pytest.mark.parametrize("placement", ["cpu-moe:1", "cpu-moe", "cpu"])
def test_evict_profile_with_experts_on_the_host(write, placement):
    """Host layers are priced unlike device layers: the profile prices each layer as it is placed."""
    from ecosim.catalog.hosts import load_host

    trace = read_trace(write(tiny_trace(4, max_nodes=20)))
    t = Trees(trace)
    rank = confidence_rank(t)
    cost = cost_model(trace, get_device("h200"), parse_placement(placement), CostConfig(host=load_host("epyc-9654-1s")),
                      check=False)
    assert np.array_equal(profiled_cost(t, rank, cost, 19), profiled_cost_reference(t, rank, cost, 19))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: Path(p).name)
def test_evict_profile_on_the_committed_traces(path):
    trace = read_trace(path)
    t = Trees(trace)
    rank = confidence_rank(t)
    kmax = int(t.n_nodes.max()) - 1
    pick = profile_steps(t.n_trees)
    for _, cost in _costs(trace, ("hbm", "ep:2")):
        assert np.array_equal(profiled_cost(t, rank, cost, kmax, pick), profiled_cost_reference(t, rank, cost, kmax, pick))


@given(st.integers(0, 5000), st.integers(1, 300))
def test_the_profile_steps_spread_evenly_over_the_trace(n_trees, steps):
    pick = profile_steps(n_trees, steps)
    assert len(pick) == min(n_trees, steps)
    assert np.all(np.diff(pick) > 0) and (n_trees == 0 or pick[0] == 0)
    assert n_trees == 0 or min(n_trees, steps) < 2 or pick[-1] == n_trees - 1
    if n_trees > steps > 1:  # even: gaps differ by at most one position
        gaps = np.diff(pick)
        assert gaps.max() - gaps.min() <= 1
    assert len(profile_steps(n_trees)) == min(n_trees, PROFILE_STEPS)


def test_a_repeated_api_replay_of_one_trace_reuses_its_work_and_gives_the_same_rows(write):
    import ecosim

    trace = read_trace(write(tiny_trace(3)))
    policies = ["confidence", "ecospec", "ecospec-auto", "evict"]
    first = ecosim.replay(trace, policy=policies, placement="ep:2")
    kept = trace.derived("replay", lambda: None)
    assert isinstance(kept, TraceReplay) and kept.memo.size("trace") > 0  # the per-trace work stays with the trace
    again = ecosim.replay(trace, policy=policies, placement="ep:2", budget=4)  # a new configuration: selection only
    assert trace.derived("replay", lambda: None) is kept
    fresh = read_trace(trace.path)  # a new Trace object: nothing kept, computed from scratch
    assert ecosim.replay(fresh, policy=policies, placement="ep:2").equals(first)
    assert ecosim.replay(read_trace(trace.path), policy=policies, placement="ep:2", budget=4).equals(again)
    assert ecosim.replay(trace, policy=policies, placement="ep:2").equals(first)


def _des_figures(result) -> tuple:
    return (result.row.to_dict(), result.latencies_s, result.makespan_s, result.forwards, result.first_step_s,
            result.inter_token_s)


@pytest.mark.parametrize("placement", ["hbm", "ep:2", "tp:2+ep:2", "offload:4", "offload:3:lfu"])
def test_des_without_events_where_nothing_interleaves_is_the_event_run_bit_for_bit(write, placement, tmp_path):
    from ecosim.des import DesConfig, des_run

    arrivals_file = tmp_path / "at.json"
    arrivals_file.write_text("[0.5, 0.0, 0.25]")
    trace = read_trace(write(tiny_trace(6, requests=3, positions=20)))
    cost = cost_model(trace, get_device("h200"), parse_placement(placement), CostConfig())
    r = TraceReplay(trace)
    configs = [DesConfig(), DesConfig(max_batch=4), DesConfig("together"), DesConfig("poisson:200"),
               DesConfig("poisson:3", seed=2), DesConfig(str(arrivals_file))]
    for spec in (PolicySpec("ar"), PolicySpec("confidence", 4), PolicySpec("ecospec", 5, 0.3, "oracle")):
        for cfg in configs:
            quick = des_run(r, spec, cost, cfg)
            assert quick.events == []  # the events were not run
            events = des_run(r, spec, cost, DesConfig(cfg.arrivals, cfg.max_batch, cfg.prefetch, cfg.seed, timeline=True))
            assert events.events  # they were
            assert _des_figures(quick) == _des_figures(events), (spec, cfg)


def test_replay_says_a_batch_with_sequential_arrivals_batches_nothing(write, capsys):
    import json

    from ecosim.cli import main

    path = str(write(tiny_trace(7)))
    args = ["replay", path, "--engine", "des", "--policy", "confidence", "--json"]
    assert main(args) == 0
    alone = json.loads(capsys.readouterr().out)["rows"]
    assert main([*args, "--max-batch", "4"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["rows"] == alone  # the batch-1 answer ...
    assert "nothing is batched" in out.err  # ... and it says why
    assert main([*args, "--max-batch", "4", "--arrivals", "together"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["rows"] != alone and "nothing is batched" not in out.err


def top_ids_reference(scores: np.ndarray, k: int) -> np.ndarray:
    """top_ids as k passes of argmax, each masking its pick (ties: argmax's first, the lower index)."""
    E = scores.shape[-1]
    work = np.maximum(scores, np.float32(-3e38), dtype=np.float32).reshape(-1, E)
    rows = np.arange(len(work))
    out = np.empty((len(work), k), dtype=np.int64)
    for j in range(k):
        i = work.argmax(axis=-1)
        out[:, j] = i
        work[rows, i] = -np.inf
    return out.reshape(*scores.shape[:-1], k)


@pytest.mark.parametrize("seed", range(4))
def test_top_ids_in_one_pass_is_k_passes_of_argmax(seed):
    from ecosim.predictors.base import top_ids

    rng = np.random.default_rng(seed)
    for E in (1, 3, 8, 64, 257):
        for k in sorted({1, 2, min(8, E), min(16, E), min(32, E), max(1, E - 1)}):
            if k >= E or k > 32:
                continue
            counts = rng.integers(0, 4, size=(50, 3, E)).astype(np.float32)  # integer counts: ties everywhere
            floats = rng.random((50, 3, E)).astype(np.float32)
            floats[rng.random(floats.shape) < 0.2] = -np.inf
            doubles = rng.standard_normal((20, E)) * 1e-3  # float64, cast to float32 as top_ids does
            for s in (counts, floats, doubles, np.zeros((4, E), np.float32)):
                assert np.array_equal(top_ids(s, k), top_ids_reference(s, k)), (E, k)
    assert top_ids(np.ones((3, 5), np.float32), 0).shape == (3, 0)


def test_replay_says_when_a_trace_may_not_fit_and_what_max_memory_to_give(write, capsys, monkeypatch):
    import json

    import ecosim.stream
    from ecosim.cli import main
    from ecosim.stream import WORKING_SET, auto_budget
    from ecosim.trace.io import row_bytes

    path = write(tiny_trace(8, requests=3))
    whole = WORKING_SET * row_bytes(read_trace(path).manifest, gates=False) * len(read_trace(path).nodes["node"])
    assert auto_budget(path, available=4 * whole) is None  # fits
    assert auto_budget(path, available=1.5 * whole) == 0.75 * whole  # does not: half the memory, in pieces
    assert auto_budget(path, available=whole / 100) is None  # not even one request would fit a piece
    args = ["replay", str(path), "--placement", "offload:3", "--predictor", "oracle", "--json"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "may not fit" not in out.err
    at_once = json.loads(out.out)
    monkeypatch.setattr(ecosim.stream, "available_memory", lambda: 1.5 * whole)
    assert main(args) == 0
    out = capsys.readouterr()
    budget = f"--max-memory {max(0.75 * whole / 1e6, 1):.0f}MB"
    assert "may not fit" in out.err and budget in out.err
    assert json.loads(out.out)["totals"] == at_once["totals"]  # read whole all the same


def test_replay_streams_by_itself_a_trace_that_would_not_fit_and_says_so(write, capsys, monkeypatch):
    import json

    import ecosim.stream
    from ecosim.cli import main
    from ecosim.stream import WORKING_SET
    from ecosim.trace.io import row_bytes

    path = write(tiny_trace(8, requests=4))
    t = read_trace(path)
    whole = WORKING_SET * row_bytes(t.manifest, gates=False) * len(t.nodes["node"])
    args = ["replay", str(path), "--placement", "offload:3", "--predictor", "oracle", "--json"]
    exact = {"ar", "confidence", "ecospec", "oracle"}  # fit nothing on the whole trace: the same in pieces
    assert main(args) == 0
    at_once = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["totals"]}
    monkeypatch.setattr(ecosim.stream, "available_memory", lambda: whole / 1.2)  # 120% of it: over the 0.9 share
    assert main(args) == 0
    out = capsys.readouterr()
    line = [s for s in out.err.splitlines() if "replayed in pieces" in s]
    assert len(line) == 1 and "120%" in line[0] and f"--max-memory {max(0.5 * whole / 1.2 / 1e6, 1):.0f}MB" in line[0]
    pieces = {r["policy"]: r for r in json.loads(out.out)["totals"]}
    assert pieces.keys() == at_once.keys() and all(pieces[p] == at_once[p] for p in exact)
    assert main([*args, "--stream-share", "0"]) == 0  # never: read whole, and said what to give
    out = capsys.readouterr()
    assert "replayed in pieces" not in out.err and "may not fit" in out.err
    assert json.loads(out.out)["totals"] == list(at_once.values())
