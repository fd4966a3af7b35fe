"""Draft steps are a property of the setting: a setting of N steps sees the recorded trees cut to
depth N (ecosim.trace.truncate) and pays for the steps it drafts (policies/base.py DRAFTING_RULE).

Hand case: one request of 6 positions; every position's tree is the chain root -> 5 draft tokens,
each accepted, every node routed to experts {0, 1} of one MoE layer. Priced on a hand device where
a verification step costs 1 (fixed) + 12 kernels x 0.1 + 2 experts x 1000 B / (1000 B/s x 0.5) =
6.2 s whatever it verifies (compute is free, no dense bytes, no KV), and a draft of d steps costs
d x (4 kernels x 0.1 + 250 B / 500 B/s) = 0.9 d for its forwards, plus (2 + 1 d) kernels x 0.1 of
bookkeeping: d + 0.2 s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ecosim
from conftest import TINY, tiny_trace
from ecosim.catalog.devices import Device
from ecosim.catalog.drafts import DraftCost
from ecosim.catalog.models import ModelShape
from ecosim.catalog.serving import ServingProfile
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.policies import PolicySpec, registry
from ecosim.policies.base import ALL_STEPS
from ecosim.replay import TraceReplay
from ecosim.stream import WORKING_SET, StreamedReplay
from ecosim.simulate import cost_model
from ecosim.catalog.devices import get_device
from ecosim.placements import parse_placement
from ecosim.trace import read_trace, truncate, write_trace
from ecosim.trace.io import Trace, row_bytes
from ecosim.tree import Trees

SHAPE = ModelShape(name="hand", family="qwen3_moe", num_layers=1, moe_layers=(0,), num_experts=8, top_k=2,
                   num_shared_experts=0, hidden_size=4, moe_intermediate_size=8, vocab_size=100, expert_bytes=1000,
                   dense_bytes=0, kv_bytes_per_token=0, bytes_per_param=2.0)
DEVICE = Device("hand", hbm_bw=1000.0, hbm_bytes=0.0, peak_bf16=1e18, peak_fp8=1e18, link_bw=16.0, pcie_bw=100.0)
PROFILE = ServingProfile(name="hand", step_fixed_s=1.0, kernel_latency_s=0.1, collective_latency_s=0.5, bw_efficiency=0.5,
                         compute_efficiency=1.0, gemm_tile_rows=0.0, overlap="max", memory_fraction=1.0,
                         spec_step_kernels=2.0, spec_level_kernels=1.0)
DRAFT = DraftCost("eagle3", 250.0, 4, False)
POSITIONS, DEPTH = 6, 5


def chain_trace() -> Trace:
    """The hand case (module docstring): tokens 100 + i along the continuation, each chain node the
    target's next token, so every node is accepted."""
    rows = []
    for pos in range(POSITIONS):
        for d in range(DEPTH + 1):  # node d at depth d, parent d - 1; its token is the continuation's pos + d
            rows.append((pos, d, d - 1, d, 100 + pos + d, 100 + pos + d + 1))
    col = lambda i, t: np.array([r[i] for r in rows], t)  # noqa: E731
    nodes = {
        "request_id": np.zeros(len(rows), np.int32), "pos": col(0, np.int32), "node": col(1, np.int16),
        "parent": col(2, np.int16), "depth": col(3, np.int8), "token": col(4, np.int32),
        "draft_logprob": np.where(col(1, np.int16) == 0, 0.0, np.log(0.9)).astype(np.float32),
        "target_next": col(5, np.int32),
        "target_logprob": np.where(col(1, np.int16) == 0, np.nan, -0.1).astype(np.float32),
        "experts": np.tile(np.array([0, 1], np.int16), (len(rows), 1)),
    }
    positions = {"request_id": np.zeros(POSITIONS, np.int32), "pos": np.arange(POSITIONS, dtype=np.int32),
                 "context_len": np.arange(POSITIONS, dtype=np.int32) + 4,
                 "n_nodes": np.full(POSITIONS, DEPTH + 1, np.int16)}
    manifest = {"format": "ecosim-trace", "version": 2, "synthetic": True, "provenance": {"kind": "synthetic"},
                "model": SHAPE.to_manifest(), "draft": {"name": "hand", "params": 0, "bytes": 0},
                "tree": {"depth": DEPTH, "topk": 1, "max_nodes": DEPTH}, "decoding": {"mode": "greedy"},
                "requests": [{"request_id": 0, "task": "qa", "positions": POSITIONS}], "recorded_on": {}}
    return Trace(Path("chain"), manifest, positions, nodes)


def hand_cost(trace: Trace) -> CostModel:
    return CostModel(SHAPE, DEVICE, config=CostConfig(serving=PROFILE), tree_depth=int(trace.manifest["tree"]["depth"]),
                     draft=DRAFT)


def seconds(trace: Trace, spec: PolicySpec) -> tuple[int, int, float]:
    row = TraceReplay(trace).run(spec, hand_cost(trace))
    return row.tokens, row.steps, round(row.time_s, 9)


def test_a_2_step_and_a_5_step_setting_by_hand():
    whole = chain_trace()
    cut = truncate(whole, 2)
    assert hand_cost(whole).draft_time(True) == pytest.approx(5.2) and hand_cost(cut).draft_time(True) == pytest.approx(2.2)
    # 5 steps: one step verifies root + 5, accepts 5: 6 tokens for 6.2 + 5.2 s
    assert seconds(whole, PolicySpec("confidence", budget=16)) == (6, 1, 11.4)
    # 2 steps: the trees are cut at depth 2; two steps of root + 2, each 6.2 + 2.2 s
    assert seconds(cut, PolicySpec("confidence", budget=16)) == (6, 2, 16.8)
    # plain decoding: six steps of 6.2 s, never a draft, whatever the setting's steps
    assert seconds(whole, PolicySpec("ar")) == seconds(cut, PolicySpec("ar")) == (6, 6, 37.2)
    # vllm-chain drafts the chain it is set to: 2 tokens on the 5-step setting pays 2 steps, as on the 2-step one
    assert seconds(whole, PolicySpec("vllm-chain", budget=2)) == seconds(cut, PolicySpec("vllm-chain", budget=2)) == (6, 2, 16.8)
    # and a chain longer than the setting drafts the setting's 2
    assert seconds(cut, PolicySpec("vllm-chain", budget=4)) == (6, 2, 16.8)
    # sglang-default's own 5 steps on the 5-step setting: it verifies 8 draft tokens' worth (here the chain, 6 nodes)
    assert seconds(whole, PolicySpec("sglang-default")) == (6, 1, 11.4)


def test_the_rule_each_policy_declares():
    verified, deepest = np.array([1, 3, 6]), np.array([0, 2, 5])
    after, before, stops = registry.get("confidence"), registry.get("ecospec-auto"), registry.get("cascade")
    knobs = PolicySpec("confidence").values
    assert after.drafting == "after" and list(after.draft_steps(knobs, verified, deepest)) == [ALL_STEPS] * 3
    assert before.drafting == "before" and list(before.draft_steps({}, verified, deepest)) == [0, ALL_STEPS, ALL_STEPS]
    assert stops.drafting == "stops" and list(stops.draft_steps({}, verified, deepest)) == [0, 2, 5]
    assert list(registry.get("vllm-chain").draft_steps({"budget": 3}, verified, deepest)) == [3, 3, 3]
    assert list(registry.get("ar").draft_steps({}, verified, deepest)) == [0, 0, 0]
    assert list(registry.get("confidence").draft_steps({"budget": 0}, verified, deepest)) == [0, 0, 0]  # budget 0 is ar
    cost = hand_cost(chain_trace())  # N = 5 caps what a step asks for; a step of 0 steps pays nothing at all
    assert list(cost.draft_times(np.array([0, 2, 7, ALL_STEPS]))) == pytest.approx([0.0, 2.2, 5.2, 5.2])


def test_truncate_cuts_trees_and_keeps_a_valid_trace(tmp_path):
    trace = read_trace(write_trace(tmp_path / "t", *tiny_trace(3, depth=4)))
    for d in (1, 2, 3):
        cut = truncate(trace, d)
        assert cut.manifest["tree"]["depth"] == d and cut.manifest["tree"]["recorded_depth"] == 4
        assert int(cut.nodes["depth"].max()) <= d
        assert len(cut.nodes["depth"]) == int((trace.nodes["depth"] <= d).sum())
        back = read_trace(write_trace(tmp_path / f"cut{d}", cut.manifest, cut.positions, cut.nodes))  # every invariant checked
        assert np.array_equal(Trees(back).accept_len, np.minimum(Trees(trace).accept_len, d))
        assert np.array_equal(truncate(truncate(trace, 3), d).nodes["node"], cut.nodes["node"])
    assert truncate(trace, 4) is trace
    for bad in (0, 5):
        with pytest.raises(EcoSimError):
            truncate(trace, bad)


POLICIES = [*registry.names()]


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), recorded=st.integers(2, 5), data=st.data())
def test_replaying_with_draft_steps_is_replaying_the_cut_trace(tmp_path_factory, seed, recorded, data):
    """For every policy and several d: `draft_steps=d` equals the trace cut to depth d, written and
    read back as a trace of its own (whose recorded depth is d), exactly."""
    tmp = tmp_path_factory.mktemp("steps")
    trace = read_trace(write_trace(tmp / "t", *tiny_trace(seed, depth=recorded, requests=2, positions=24, max_nodes=10)))
    for d in sorted(set(data.draw(st.lists(st.integers(1, recorded), min_size=1, max_size=2)))):
        cut = truncate(trace, d)
        own = read_trace(write_trace(tmp / f"d{d}" / "t", cut.manifest, cut.positions, cut.nodes))
        a = ecosim.replay(trace, POLICIES, placement="ep:2", draft_steps=d, predictor="freq")
        b = ecosim.replay(own, POLICIES, placement="ep:2", predictor="freq")
        assert a.equals(b)


def test_the_streamed_engine_cuts_each_chunk(tmp_path):
    path = write_trace(tmp_path / "t", *tiny_trace(5, depth=4, requests=3, positions=20))
    trace = read_trace(path)
    cost = cost_model(truncate(trace, 2), get_device("h200"), parse_placement("hbm"), CostConfig())
    rows = 300  # node rows per chunk: a request or two of the 3 (a request holds about 260)
    streamed = StreamedReplay(path, WORKING_SET * row_bytes(trace.manifest, False) * rows, steps=2)
    assert streamed.trace.manifest["tree"]["depth"] == 2
    for spec in (PolicySpec("confidence", budget=4), PolicySpec("cascade"), PolicySpec("oracle")):
        assert streamed.run(spec, cost) == TraceReplay(truncate(trace, 2)).run(spec, cost)


def test_the_default_is_the_recorded_depth(tmp_path):
    trace = read_trace(write_trace(tmp_path / "t", *tiny_trace(1, depth=3)))
    a = ecosim.replay(trace, ["confidence", "ecospec-auto"], predictor="freq")
    b = ecosim.replay(trace, ["confidence", "ecospec-auto"], predictor="freq", draft_steps=3)
    assert a.equals(b)
    with pytest.raises(EcoSimError, match="depth 3"):
        ecosim.replay(trace, "confidence", draft_steps=4)


def _cli_json(capsys, *args: str) -> dict:
    import json

    from ecosim.cli import main

    assert main(list(args)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_deep_recording_no_longer_leans_against_speculation(tmp_path, capsys):
    """Two synthetic GPT-OSS-120B traces that differ only in the depth they were recorded at: the
    depth-8 one holds the depth-3 one's settings, so tuning on it finds as much (within what the
    generator's node budget spread deeper takes away), and cut to 3 steps it drafts what depth 3 drafts."""
    from ecosim.cli import main

    paths = {}
    for depth in (3, 8):
        paths[depth] = str(tmp_path / f"a{depth}")
        assert main(["synth", paths[depth], "--model", "gpt-oss-120b", "--depth", str(depth), "--accept", "0.7",
                     "--max-nodes", "60", "--requests", "3", "--positions", "120"]) == 0
    capsys.readouterr()
    a3, a8 = (_cli_json(capsys, "tune", paths[d], "--placement", "tp:8", "--json") for d in (3, 8))
    assert a8["speedup_vs_ar"] >= 0.9 * a3["speedup_vs_ar"] and a8["speculation_pays"]
    assert a8["vllm"]["speedup_vs_ar"] >= 0.95 * a3["vllm"]["speedup_vs_ar"]
    assert a8["used"]["draft_steps"] == a8["steps"] >= 1  # the recommended setting's steps and draft time
    r3 = _cli_json(capsys, "replay", paths[3], "--placement", "tp:8", "--policy", "confidence", "--json")
    r8 = _cli_json(capsys, "replay", paths[8], "--placement", "tp:8", "--policy", "confidence", "--json", "--draft-steps", "3")
    assert r8["used"]["draft_time_s"]["a8"] == r3["used"]["draft_time_s"]["a3"] > 0
    assert r8["draft_steps"] == {"a8": 3}
    whole = _cli_json(capsys, "replay", paths[8], "--placement", "tp:8", "--policy", "confidence", "--json")
    assert whole["used"]["draft_time_s"]["a8"] > r8["used"]["draft_time_s"]["a8"]  # 8 steps cost more than 3


def test_a_sweep_has_a_draft_steps_axis(tmp_path):
    path = write_trace(tmp_path / "t", *tiny_trace(7, depth=4, requests=2, positions=30))
    df = ecosim.sweep(path, ["confidence", "vllm-chain"], placement="ep:2", out=tmp_path / "s", budget=[3, 16],
                      draft_steps="2,recorded")
    assert sorted(set(df["draft_steps"].to_list()), key=str) == [2, None]
    for steps in (2, None):
        want = ecosim.replay(path, ["ar", "confidence", "vllm-chain", "oracle"], placement="ep:2", budget=16,
                             draft_steps=steps)
        got = df.filter((pl.col("budget").is_null() | (pl.col("budget") == 16))
                        & (pl.col("draft_steps").is_null() if steps is None else pl.col("draft_steps") == steps))
        assert got.sort("policy")["time_s"].to_list() == want.sort("policy")["time_s"].to_list()
        assert got.sort("policy")["oracle_fraction"].to_list() == want.sort("policy")["oracle_fraction"].to_list()
    with pytest.raises(EcoSimError, match="depth 4"):
        ecosim.sweep(path, "confidence", out=tmp_path / "s2", draft_steps=5)


def test_a_sampled_trace_cut_is_a_valid_sampled_trace(tmp_path):
    trace = read_trace(Path(__file__).resolve().parent.parent / "traces-sampled" / "qa")
    cut = truncate(trace, 2)
    back = read_trace(write_trace(tmp_path / "qa", cut.manifest, cut.positions, cut.nodes))
    assert back.manifest["decoding"] == trace.manifest["decoding"] and back.manifest["tree"]["depth"] == 2
    assert np.array_equal(Trees(back).accept_len, np.minimum(Trees(trace).accept_len, 2))
