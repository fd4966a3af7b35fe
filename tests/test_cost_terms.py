"""Every term of the step model (ecosim/cost/) on cases worked by hand, and its monotone properties."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

from ecosim.catalog.devices import Device, get_device
from ecosim.catalog.drafts import DraftCost, draft_cost
from ecosim.catalog.models import ModelShape, get_model
from ecosim.catalog.serving import ServingProfile, load_serving
from ecosim.cli.options import terms_text
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.placements import parse_placement

# One MoE layer (GQA, no shared expert: 5 + 7 = 12 kernels), 8 experts of 1000 bytes and 96 parameters
# (3 x hidden 4 x intermediate 8), top-2, dense 500 bytes = 250 parameters, 10 KV bytes per token.
SHAPE = ModelShape(name="hand", family="qwen3_moe", num_layers=1, moe_layers=(0,), num_experts=8, top_k=2,
                   num_shared_experts=0, hidden_size=4, moe_intermediate_size=8, vocab_size=16, expert_bytes=1000,
                   dense_bytes=500, kv_bytes_per_token=10, bytes_per_param=2.0)
DEVICE = Device("hand", hbm_bw=1000.0, hbm_bytes=0.0, peak_bf16=1000.0, peak_fp8=1000.0, link_bw=16.0, pcie_bw=100.0)
PROFILE = ServingProfile(name="hand", step_fixed_s=1.0, kernel_latency_s=0.1, collective_latency_s=0.5, bw_efficiency=0.5,
                         compute_efficiency=1.0, gemm_tile_rows=0.0, overlap="sum", memory_fraction=1.0)
N, CTX = np.array([2]), np.array([8])


def cost(placement: str = "hbm", **changes) -> CostModel:
    return CostModel(SHAPE, DEVICE, parse_placement(placement), CostConfig(serving=PROFILE.replace(**changes)))


def bits(*experts: int) -> np.ndarray:
    """(1 step, 1 layer, 1 word) bitset of the given experts."""
    return np.array([[[sum(1 << e for e in experts)]]], dtype=np.uint64)


def step(c: CostModel, *experts: int, speculative: bool = False) -> float:
    union = c.placement.union_per_group(bits(*experts), SHAPE.num_experts)
    return float(c.step_times(union, N, CTX, speculative)[0])


def test_one_layer_one_device_by_hand():
    # fixed 1 + 12 kernels x 0.1 = 2.2; experts 3 x 1000 / (1000 x 0.5) = 6 + FLOPs 2 x 2 tokens x 2 x 96 / 1000 = 0.768;
    # dense 500 / 500 = 1 + 2 x 2 x 250 / 1000 = 1; KV (8 + 2) x 10 / 500 = 0.2
    assert step(cost(), 0, 1, 5) == pytest.approx(2.2 + 6.768 + 2.0 + 0.2)


def test_an_older_engine_release_adds_its_extra_kernels_on_every_layer():
    # SHAPE has 1 layer of 12 kernels at 0.1 s; 3 more tiny ones at 0.05 s: fixed 1 + 12 x 0.1 + 1 x 3 x 0.05 = 2.35
    old = cost(extra_layer_kernels=3, extra_kernel_s=0.05)
    assert old.kernels == 15 and old.step_overhead == pytest.approx(2.35)
    assert step(old, 0, 1, 5) - step(cost(), 0, 1, 5) == pytest.approx(0.15)
    # a dense first layer (5 + 4 = 9 kernels) and 3 MoE layers (12 each): 45 fused + 4 layers x 3 extra = 57 kernels
    deep = dataclasses.replace(SHAPE, num_layers=4, moe_layers=(1, 2, 3))
    c = CostModel(deep, DEVICE, config=CostConfig(serving=PROFILE.replace(extra_layer_kernels=3, extra_kernel_s=0.05)))
    assert c.kernels == 57 and c.applied()["kernels_per_step"] == 57 and c.step_overhead == pytest.approx(1 + 45 * 0.1 + 12 * 0.05)
    assert "57 kernels (3 per layer beyond the fused count, 5e+04 us each)" in terms_text(c.applied())
    assert "beyond the fused count" not in terms_text(cost().applied())
    # every graph node pays the platform's own replay cost: 1 + 12 x (0.1 + 0.01) + 3 x (0.05 + 0.01)
    amd = CostModel(SHAPE, dataclasses.replace(DEVICE, graph_node_s=0.01),
                    config=CostConfig(serving=PROFILE.replace(extra_layer_kernels=3, extra_kernel_s=0.05)))
    assert amd.step_overhead == pytest.approx(1 + 12 * 0.11 + 3 * 0.06)
    # the draft's forwards are its own model's kernels: an older target release does not add to them
    draft = DraftCost(kind="model", forward_bytes=100, forward_kernels=5, assumed=False)
    with_extra = CostModel(SHAPE, DEVICE, config=CostConfig(serving=PROFILE.replace(extra_layer_kernels=3, extra_kernel_s=0.05)),
                           tree_depth=2, draft=draft)
    plain = CostModel(SHAPE, DEVICE, config=CostConfig(serving=PROFILE), tree_depth=2, draft=draft)
    assert with_extra.draft_forward_time() == plain.draft_forward_time() and with_extra.draft_time(True) == plain.draft_time(True)
    with pytest.raises(EcoSimError, match="non-negative"):
        ServingProfile.from_dict({"name": "bad", "extra_layer_kernels": -1})


def test_overlap_max_takes_the_larger_of_memory_and_compute():
    assert step(cost(overlap="max"), 0, 1, 5) == pytest.approx(2.2 + 6.0 + 1.0 + 0.2)


def test_tp2_by_hand():
    # experts: each device reads half of each of the 3: 1.5 x 1000 / 500 = 3, FLOPs halved 0.384;
    # 2 all-reduces of n h 2 = 16 bytes, ring 2 (D-1)/D = 1 x 16 / 16 B/s = 1 s + 0.5 latency each: 3;
    # dense halved: 0.5 + 0.5; KV halved: 0.1
    assert step(cost("tp:2"), 0, 1, 5) == pytest.approx(2.2 + 3.384 + 3.0 + 1.0 + 0.1)


def test_an_inter_node_link_adds_its_latency_to_every_collective():
    # tp:2 as above, with a link that adds 0.25 s per collective: 2 all-reduces, 0.5 s more
    c = CostModel(SHAPE, DEVICE.replace(link_latency_s=0.25), parse_placement("tp:2"), CostConfig(serving=PROFILE))
    assert step(c, 0, 1, 5) == pytest.approx(2.2 + 3.384 + 3.0 + 1.0 + 0.1 + 0.5)


def test_a_platform_graph_node_cost_adds_to_every_kernel():
    # hbm as in test_one_layer_one_device_by_hand, on a platform whose graph replay adds 0.05 s per kernel node:
    # 12 kernels x 0.05 = 0.6 s more; a draft forward's 4 kernels and the bookkeeping kernels pay it too
    c = CostModel(SHAPE, DEVICE.replace(graph_node_s=0.05), config=CostConfig(serving=PROFILE))
    assert c.kernel_s == pytest.approx(0.15)
    assert step(c, 0, 1, 5) == pytest.approx(2.2 + 6.768 + 2.0 + 0.2 + 0.6)
    d = CostModel(SHAPE, DEVICE.replace(graph_node_s=0.05), config=CostConfig(serving=PROFILE.replace(spec_step_kernels=8.0)),
                  tree_depth=3, draft=DraftCost("eagle3", 250.0, 4, False))
    # 3 forwards x (4 x 0.15 + 0.5) + 8 bookkeeping kernels x 0.15
    assert d.draft_time(True) == pytest.approx(3.3 + 1.2)
    assert c.describe()["graph_node_s"] == 0.05 and "graph_node_s" not in DEVICE.to_dict()
    assert c.applied()["graph_node_s"] == 0.05 and "graph_node_s" not in cost().applied()
    assert "x (1e+05 us + 5e+04 us the platform's graph node)" in terms_text(c.applied())


def test_ep2_by_hand():
    # experts 0-3 on device 0, 4-7 on device 1: {0, 1, 5} reads 2 on device 0 (the straggler): 2 x 1000 / 500 = 4,
    # FLOPs halved 0.384; one all-reduce (attention) 1.5; two all-to-alls of (G-1)/G x n k h 2 = 16 bytes: 2 x (0.5 + 1);
    # dense 1.0, KV 0.1
    assert step(cost("ep:2"), 0, 1, 5) == pytest.approx(2.2 + 4.384 + 1.5 + 3.0 + 1.0 + 0.1)


def test_dp_attention_ep2_by_hand():
    # experts as ep:2: device 0 reads {0, 1}: 4, FLOPs halved 0.384; no all-reduce (attention is local);
    # two all-to-alls 2 x (0.5 + 1) = 3; dense whole on the request's device: 1 + 1 = 2; KV whole: 0.2
    assert step(cost("dpattn+ep:2"), 0, 1, 5) == pytest.approx(2.2 + 4.384 + 3.0 + 2.0 + 0.2)


def test_tp2_ep2_by_hand():
    # 4 devices, 2 groups of 2: device of group 0 reads half of experts 0 and 1: 1000 / 500 = 2; FLOPs / 4 = 0.192;
    # 2 all-reduces of 2 (D-1)/D = 1.5 x 16 bytes: 2 x (0.5 + 1.5) = 4; 2 all-to-alls 2 x (0.5 + 1) = 3;
    # dense and KV over 4: 0.25 + 0.25, 0.05
    assert step(cost("tp:2+ep:2"), 0, 1, 5) == pytest.approx(2.2 + 2.192 + 4.0 + 3.0 + 0.5 + 0.05)


def test_grouped_gemm_tile_quantisation():
    # 2 tokens x top-2 over 3 experts = 4/3 tokens per expert in a 4-row tile: efficiency 1/3, FLOPs time x3
    assert step(cost(gemm_tile_rows=4.0), 0, 1, 5) == pytest.approx(2.2 + 6.0 + 3 * 0.768 + 2.0 + 0.2)


def test_w8a8_dense_gemms_compute_whole_tiles_by_hand():
    # block FP8 (act_quant, 1 byte per weight): dense 628 bytes = the BF16 LM head (16 x 4 x 2 = 128 bytes) + 500 W8A8
    # weights; dense_params counts 628. 2 tokens in a 4-row tile: the 500 quantised weights cost 4 rows, 2 x 4 x 500 =
    # 4000 FLOPs, the head 2 x 2 x 128 = 512: 4512 (2 x 2 x 628 = 2512 without the tile)
    q = dataclasses.replace(SHAPE, dense_bytes=628, bytes_per_param=1.0, act_quant=True)
    tiled = CostModel(q, DEVICE, parse_placement("hbm"), CostConfig(serving=PROFILE.replace(gemm_tile_rows=4.0)))
    assert tiled.dense_flops(np.array([2.0]))[0] == pytest.approx(4512.0)
    assert tiled.dense_flops(np.array([8.0]))[0] == pytest.approx(2 * 8 * 628)  # a full tile: no padding
    assert CostModel(q, DEVICE, parse_placement("hbm"), CostConfig(serving=PROFILE)).dense_flops(np.array([2.0]))[0] == 2512
    plain = CostModel(dataclasses.replace(q, act_quant=False), DEVICE, parse_placement("hbm"),
                      CostConfig(serving=PROFILE.replace(gemm_tile_rows=4.0)))
    assert plain.dense_flops(np.array([2.0]))[0] == 2512  # BF16 / weight-only dense GEMMs: no tile claimed
    # in a step (overlap sum): dense memory 628 / 500 = 1.256 + 4512 / 1000 FP8 FLOP/s
    base = float(plain.other_times(N, CTX, False)[0])
    assert float(tiled.other_times(N, CTX, False)[0]) - base == pytest.approx((4512 - 2512) / 1000 + tiled.step_overhead
                                                                              - plain.step_overhead)


def test_draft_by_hand():
    c = CostModel(SHAPE, DEVICE, config=CostConfig(serving=PROFILE), tree_depth=3, draft=DraftCost("eagle3", 250.0, 4, False))
    # 3 forwards x (4 kernels x 0.1 + 250 / 500); no bookkeeping kernels, host sync 0 in PROFILE
    assert c.draft_time(True) == pytest.approx(2.7)
    assert step(c, 0, 1, 5, speculative=True) - step(c, 0, 1, 5) == pytest.approx(2.7)
    assert CostModel(SHAPE, DEVICE, config=CostConfig(serving=PROFILE, draft_time_s=0.5), tree_depth=3,
                     draft=DraftCost("eagle3", 250.0, 4, False)).draft_time(True) == 0.5  # a flag wins


def spec(placement: str = "hbm", depth: int = 3, draft: DraftCost | None = None, **changes) -> CostModel:
    return CostModel(SHAPE, DEVICE, parse_placement(placement), CostConfig(serving=PROFILE.replace(**changes)),
                     tree_depth=depth, draft=draft or DraftCost("eagle3", 250.0, 4, False))


def test_speculative_bookkeeping_kernels_by_hand():
    # (8 per step + 3 levels x 4 per level) x 0.1 s = 2.0 s on top of the 2.7 s of forwards
    assert spec(spec_step_kernels=8.0, spec_level_kernels=4.0).draft_time(True) == pytest.approx(2.7 + 2.0)
    # one level more: one forward (0.9) and 4 kernels (0.4) more
    assert spec(depth=4, spec_step_kernels=8.0, spec_level_kernels=4.0).draft_time(True) == pytest.approx(3.6 + 2.4)


def test_level_latency_by_hand():
    # 3 levels x 0.25 s on top of the 2.7 s of forwards
    assert spec(spec_level_s=0.25).draft_time(True) == pytest.approx(2.7 + 0.75)


def test_host_sync_only_where_the_engine_does_not_overlap_it():
    assert spec(spec_sync_s=1.5, spec_overlap=True).draft_time(True) == pytest.approx(2.7)
    assert spec(spec_sync_s=1.5, spec_overlap=False).draft_time(True) == pytest.approx(2.7 + 1.5)
    assert spec(spec_sync_s=1.5, spec_overlap=False).draft_time(False) == 0.0  # plain steps never pay it


def test_draft_collectives_tp2_by_hand():
    # tp:2: bytes halved 250 / 2 / 500 = 0.25, 4 kernels 0.4; one dense layer: 2 all-reduces of one token
    # (2 (D-1)/D x 1 x h 4 x 2 bytes = 8 bytes / 16 B/s = 0.5 s + 0.5 latency) = 2.0: 2.65 per forward, 3 forwards
    assert spec("tp:2").draft_forward_time() == pytest.approx(2.65)
    assert spec("tp:2").draft_time(True) == pytest.approx(3 * 2.65)


def test_mtp_draft_collectives_ep2_by_hand():
    # ep:2, an MTP module (one MoE layer): 4 kernels 0.4 + 250 / 2 / 500 = 0.25; its MoE layer's collectives:
    # 1 all-reduce (8 bytes: 0.5 + 0.5) + 2 all-to-alls ((G-1)/G x k 2 x h 4 x 2 = 8 bytes: 0.5 + 0.5 each) = 3.0
    mtp = DraftCost("mtp", 250.0, 4, False, layers=1, moe_layers=1)
    assert spec("ep:2", draft=mtp).draft_forward_time() == pytest.approx(0.65 + 3.0)


def test_a_profile_written_before_the_spec_fields_keeps_its_step_cost(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"name": "old", "draft_step_fixed_s": 0.002}))
    p = load_serving(old)
    assert p.spec_sync_s == 0.002 and p.spec_overlap is False


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(0, 8), more=st.integers(1, 4), placement=st.sampled_from(["hbm", "tp:2", "ep:4", "tp:2+ep:2"]),
       kind=st.sampled_from(["eagle3", "mtp", "early-exit"]), bw=st.floats(1e11, 1e13), faster=st.floats(1.0, 4.0),
       sync=st.floats(0.0, 1e-2), overlap=st.booleans())
def test_deeper_drafts_never_cost_less_and_bandwidth_never_more(depth, more, placement, kind, bw, faster, sync, overlap):
    m = get_model("qwen3-30b-a3b")
    d = draft_cost({"kind": kind, "layers": 2}, m)
    prof = load_serving("cuda-graphs").replace(spec_sync_s=sync, spec_overlap=overlap, spec_level_s=sync / 4)

    def t(levels: int, b: float) -> float:
        c = CostModel(m, get_device("h100").replace(hbm_bw=b), parse_placement(placement), CostConfig(serving=prof),
                      tree_depth=levels, draft=d)
        return c.draft_time(True)

    assert t(depth + more, bw) >= t(depth, bw) - 1e-15
    assert t(depth, bw * faster) <= t(depth, bw) + 1e-15
    assert t(depth, bw) >= (0.0 if overlap else sync) - 1e-15


def test_synthetic_traces_do_not_draft_for_free():
    d = draft_cost({"name": "synthetic", "params": 0, "bytes": 0}, get_model("qwen3-30b-a3b"))
    assert d.kind == "eagle3" and d.forward_bytes > 0 and d.forward_kernels > 0 and d.assumed
    mtp = draft_cost({"kind": "mtp"}, get_model("deepseek-v3.1"))
    assert mtp.forward_bytes > 8 * get_model("deepseek-v3.1").expert_bytes


def test_experts_only_is_the_union_at_raw_bandwidth():
    for placement, want in (("hbm", 3.0), ("tp:2", 1.5), ("ep:2", 2.0)):
        c = CostModel(SHAPE, DEVICE, parse_placement(placement), CostConfig(mode="experts-only", serving=PROFILE))
        assert step(c, 0, 1, 5, speculative=True) == pytest.approx(want)


def test_cli_value_beats_profile_beats_default():
    assert cost().terms.bw_efficiency == 0.5
    c = CostModel(SHAPE, DEVICE, config=CostConfig(serving=PROFILE, bw_efficiency=0.25, step_overhead_s=0.0))
    assert c.terms.bw_efficiency == 0.25 and c.terms.step_fixed_s == 0.0  # an explicit 0 is a value, not "unset"
    default = CostModel(SHAPE, get_device("h200"))
    assert default.terms.serving == "cuda-graphs" and default.terms.bw_efficiency == load_serving("cuda-graphs").bw_efficiency


def test_shipped_profiles_name_a_source_for_every_constant():
    for name in ("cuda-graphs", "eager"):
        p = load_serving(name)
        assert p.source and {k for k, _ in p.sources} >= {"step_fixed_s", "kernel_latency_s", "collective_latency_s",
                                                          "bw_efficiency", "gemm_tile_rows", "memory_fraction",
                                                          "extra_layer_kernels", "extra_kernel_s"}
        assert p.extra_layer_kernels == 0 and p.extra_kernel_s > 0  # a current engine: the fused count; a price for older ones


MODEL = get_model("qwen3-30b-a3b")
L = MODEL.num_moe_layers


@settings(max_examples=60, deadline=None)
@given(placement=st.sampled_from(["hbm", "tp:2", "ep:4", "tp:2+ep:2"]), n=st.integers(1, 64), extra=st.integers(1, 64),
       u=st.integers(1, 32), du=st.integers(0, 32), c=st.integers(0, 8192), dc=st.integers(0, 8192),
       bw=st.floats(1e11, 1e13), more=st.floats(1.0, 4.0), mode=st.sampled_from(["full", "experts-only"]))
def test_more_work_never_costs_less_and_more_bandwidth_never_more(placement, n, extra, u, du, c, dc, bw, more, mode):
    place = parse_placement(placement)
    dev = get_device("h100").replace(hbm_bw=bw)

    def t(tokens, union, ctx, b=bw):
        cm = CostModel(MODEL, dev.replace(hbm_bw=b), place, CostConfig(mode=mode))
        per = np.full((1, L, place.groups), union, dtype=np.float64)
        return float(cm.step_times(per, np.array([tokens]), np.array([ctx]), speculative=True)[0])

    base = t(n, u, c)
    assert t(n + extra, u, c) >= base - 1e-15
    assert t(n, u + du, c) >= base - 1e-15
    assert t(n, u, c + dc) >= base - 1e-15
    assert t(n, u, c, bw * more) <= base + 1e-15


def test_cli_profile_file_and_footer_name_every_value(tmp_path):
    prof = tmp_path / "mine.json"
    prof.write_text(json.dumps({"name": "mine", "step_fixed_s": 0.001, "kernel_latency_s": 0.0, "bw_efficiency": 0.5}))
    args = [sys.executable, "-m", "ecosim.cli", "replay", str(ROOT / "traces" / "qa"), "--policy", "ar", "--profile", str(prof)]
    r = subprocess.run([*args, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    terms = json.loads(r.stdout)["used"]
    assert terms["serving"] == "mine" and terms["step_fixed_s"] == 0.001 and terms["kernel_latency_s"] == 0.0
    assert terms["bw_efficiency"] == 0.5 and terms["collective_latency_s"] == 0.0  # absent fields: the field default
    r = subprocess.run([*args, "--bw-efficiency", "0.25"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and "used: profile mine: step fixed 1000 us" in r.stdout and "bw eff 0.25" in r.stdout
    bad = subprocess.run([*args[:-1], str(tmp_path / "nope.json")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and "serving profile" in bad.stderr


def test_a_profile_file_can_name_a_base_and_hold_only_what_it_changes(tmp_path):
    older = tmp_path / "sglang-0.4.5.json"
    older.write_text(json.dumps({"base": "cuda-graphs", "extra_layer_kernels": 63,
                                 "sources": {"extra_layer_kernels": "counted from that release's source"}}))
    p, shipped = load_serving(older), load_serving("cuda-graphs")
    assert p.name == "sglang-0.4.5" and p.extra_layer_kernels == 63
    assert p.kernel_latency_s == shipped.kernel_latency_s and p.extra_kernel_s == shipped.extra_kernel_s  # the base's
    assert dict(p.sources)["extra_layer_kernels"] == "counted from that release's source"
    assert dict(p.sources)["kernel_latency_s"] == dict(shipped.sources)["kernel_latency_s"]
    args = [sys.executable, "-m", "ecosim.cli", "replay", str(ROOT / "traces" / "qa"), "--policy", "ar", "--profile", str(older)]
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    # the tiny target: 4 layers of 12 fused kernels, and 63 more per layer at 2.06 us each
    assert r.returncode == 0 and "used: profile sglang-0.4.5:" in r.stdout
    assert "300 kernels (63 per layer beyond the fused count, 2.06 us each)" in r.stdout
    loop = tmp_path / "loop.json"
    loop.write_text(json.dumps({"base": str(loop)}))
    bad = subprocess.run([*args[:-1], str(loop)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and "base must name another serving profile" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("model,placement", [("deepseek-v3.1", "ep:8"), ("deepseek-v3.1", "tp:2+ep:4"),
                                             ("qwen3-30b-a3b", "cpu-moe:20"), ("qwen3-30b-a3b", "offload:32")])
def test_steps_priced_a_block_at_a_time_are_priced_as_one(model, placement, monkeypatch):
    """Blocks bound the (steps, layers, groups) temporaries and change no float."""
    import ecosim.cost as cost_module
    from ecosim.catalog.hosts import load_host

    m = get_model(model)
    c = CostModel(m, get_device("h200"), parse_placement(placement), CostConfig(host=load_host("epyc-9654-1s")), tree_depth=4)
    rng = np.random.default_rng(0)
    groups = c.placement.groups
    union = rng.integers(0, m.num_experts // groups + 1, (50, m.num_moe_layers, groups))
    tokens = rng.integers(1, 40, 50)
    misses = rng.integers(0, 5, (50, m.num_moe_layers)) if c.placement.stateful else None
    whole = c.layer_times(union, tokens, misses)
    monkeypatch.setattr(cost_module, "PRICE_BLOCK", m.num_moe_layers * groups * 3)  # 3 steps a block: 17 blocks
    assert np.array_equal(c.layer_times(union, tokens, misses), whole)
