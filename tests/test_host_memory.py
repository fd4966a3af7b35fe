"""Experts in host memory: hosts as data, GGUF dtypes, the cpu-moe[:N] and cpu placements, their capacity
refusals, and validate's calibrated CPU as a host; every term by hand-worked numbers."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT, TINY
from ecosim.catalog.devices import get_device
from ecosim.catalog.dtypes import BITS, at_dtype, bits
from ecosim.catalog.hosts import Host, from_calibration, load_host
from ecosim.catalog.models import get_model
from ecosim.catalog.serving import ServingProfile
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.placements import Hbm, parse_placement
from ecosim.placements.cpu import Cpu
from ecosim.placements.cpu_moe import CpuMoe

VALIDATE_RUN = ROOT / "tests" / "validate" / "data" / "ecosim-tiny-x256-cpu"


def ecosim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ), timeout=300)


def host(**kw) -> Host:
    """A host with round numbers: 100 GB/s peak (1 socket x 1 channel x 12500 MT/s x 8 B), 1 TFLOP/s."""
    base = dict(name="h", sockets=1, channels=1, mt_s=12500, read_efficiency=0.5, cores=8, gemv_flops=1e12,
                gemm_flops=1e12, ram_bytes=1e12)
    return Host(**{**base, **kw})


# ---------------------------------------------------------------------------------------------- data


@pytest.mark.parametrize("name,bw", [("xeon-6454s-1s", 307.2e9), ("xeon-6454s-2s", 614.4e9),
                                     ("epyc-9654-1s", 460.8e9), ("epyc-9355-1s", 576e9), ("desktop-ddr5-2ch", 96e9)])
def test_host_bandwidth_is_sockets_channels_transfers_and_eight_bytes(name, bw):
    h = load_host(name)
    assert h.bandwidth == pytest.approx(bw)  # e.g. 8 channels x 4800 MT/s x 8 B = 307.2 GB/s
    assert h.source and {"channels", "read_efficiency", "gemv_flops", "ram_bytes"} <= dict(h.sources).keys()


def test_gguf_bits_per_weight_are_block_bytes():
    assert bits("q4_k") == 4.5  # 144 bytes per 256
    assert bits("q8_0") == 8.5  # 34 bytes per 32
    assert bits("iq4_xs") == 4.25 and bits("q4_0") == 4.5 and bits("q6_k") == 6.5625
    assert bits("q4_k_m") == pytest.approx(4.82, abs=0.005)  # 404.43 GB x 8 / 671.3e9 weights
    assert all(src for _, src in BITS.values())


def test_a_gguf_type_stores_every_matrix_at_its_bits():
    ds = get_model("deepseek-v3.1")
    q = at_dtype(ds, "q4_k")
    assert q.expert_bytes == round(3 * 7168 * 2048 * 0.5625)  # 24,772,608 B per routed expert
    assert q.dense_bytes == int(ds.dense_params * 0.5625)  # dense weights and LM head too
    assert not q.act_quant


def test_dtype_applies_to_config_json_shapes(tmp_path):
    cfg = ROOT / "ecosim" / "catalog" / "data" / "configs" / "glm-4.6" / "config.json"
    shape = get_model(str(cfg))
    c = CostModel(shape, get_device("h200"), Hbm(), CostConfig(dtype="q8_0"))
    assert c.model.expert_bytes == round(shape.expert_params * 8.5 / 8)


# ------------------------------------------------------------------------------------- host layers


def test_host_layer_time_by_hand():
    """u = 4 experts of 1e8 B at 100 GB/s x 0.5 = 8 ms; 1 token's 2 k P_e FLOPs (k = 2, P_e = 3 x 64 x 32) at
    1 TFLOP/s are nothing beside it; the hidden states' round trip 2 x 64 x 2 B over 32 GB/s; 0.5 ms of sync."""
    model = dataclasses.replace(TINY, expert_bytes=100_000_000)
    engine = ServingProfile(name="e", host_layer_s=5e-4)
    c = CostModel(model, get_device("rtx4090"), CpuMoe(), CostConfig(host=host(), serving=engine))
    t = c.layer_times(np.array([[4, 4, 4]]), np.array([1]))
    want = 4e8 / 50e9 + 2 * 64 * 2 / 32e9 + 5e-4
    assert t == pytest.approx(np.full((1, 3), want), rel=1e-12)


def test_host_compute_bound_and_the_small_gemm_tile():
    """Compute-bound host: 1 token runs the matrix-vector path; 2 tokens over 4 experts (m = 2 x 2 / 4 = 1 token
    per expert) run tiles of 16 rows: 1/16 of the small-GEMM rate, so 2 tokens cost 32x one's arithmetic."""
    h = host(gemv_flops=1e9, gemm_flops=1e9, gemm_rows=16, mt_s=1e9)  # bandwidth so high memory is ~0
    c = CostModel(TINY, get_device("rtx4090"), Cpu(), CostConfig(host=h))
    flops1 = 2 * 1 * 2 * 3 * 64 * 32
    one = c.layer_times(np.array([[2, 2, 2]]), np.array([1]))[0, 0]
    two = c.layer_times(np.array([[4, 4, 4]]), np.array([2]))[0, 0]
    assert one == pytest.approx(flops1 / 1e9, rel=1e-6)
    assert two == pytest.approx(2 * flops1 / (1e9 / 16), rel=1e-6)


def test_host_overlap_sum_adds_memory_and_compute():
    h = host(overlap="sum", read_efficiency=1.0, gemv_flops=1e9)
    model = dataclasses.replace(TINY, expert_bytes=100_000_000)
    c = CostModel(model, get_device("rtx4090"), Cpu(), CostConfig(host=h))
    t = c.layer_times(np.array([[1, 1, 1]]), np.array([1]))[0, 0]
    assert t == pytest.approx(1e8 / 100e9 + 2 * 2 * 3 * 64 * 32 / 1e9, rel=1e-9)  # no PCIe under cpu


def test_cpu_moe_n_puts_the_first_n_blocks_on_the_host():
    ds = get_model("deepseek-v3.1")  # MoE layers 3..60
    assert CpuMoe(10).host_layers(ds).sum() == 7 and CpuMoe().host_layers(ds).sum() == 58
    assert parse_placement("cpu-moe:10") == CpuMoe(10) and parse_placement("cpu-moe") == CpuMoe()
    assert str(parse_placement("cpu")) == "cpu"


def test_cpu_moe_n_prices_host_layers_on_the_host_and_the_rest_on_the_gpu():
    model = dataclasses.replace(TINY, expert_bytes=100_000_000)
    c = CostModel(model, get_device("rtx4090"), CpuMoe(1), CostConfig(host=host()))
    hbm = CostModel(model, get_device("rtx4090"), Hbm(), CostConfig())
    t = c.layer_times(np.array([[4, 4, 4]]), np.array([1]))[0]
    assert t[1:] == pytest.approx(hbm.layer_times(np.array([[4, 4, 4]]), np.array([1]))[0, 1:])
    assert t[0] > 10 * t[1]  # 50 GB/s against the GPU's 806


@given(u=st.integers(0, 8), n=st.integers(1, 16), du=st.integers(0, 8), dn=st.integers(0, 8))
def test_a_host_layer_never_gets_cheaper_with_more_experts_or_tokens(u, n, du, dn):
    c = CostModel(TINY, get_device("rtx4090"), CpuMoe(), CostConfig(host=host(gemm_rows=16)))
    before = c.layer_times(np.array([[u, u, u]]), np.array([n]))[0, 0]
    after = c.layer_times(np.array([[min(u + du, 8)] * 3]), np.array([n + dn]))[0, 0]
    if n + dn > 1 and n == 1 and c.host.gemm_flops < c.host.gemv_flops:
        return
    assert after >= before - 1e-15


# ----------------------------------------------------------------------------------------- capacity


def test_deepseek_with_every_expert_in_64gb_is_refused_naming_what_fits():
    small = host(ram_bytes=64e9)
    c = CostModel(get_model("deepseek-v3.1"), get_device("rtx4090d"), CpuMoe(), CostConfig(host=small, dtype="q4_k_m"))
    with pytest.raises(EcoSimError) as e:
        c.check(1000)
    msg = str(e.value)
    assert "\n" not in msg and "394.0 GB of host RAM" in msg and "57.6 GB" in msg and "438 GB of RAM" in msg


def test_refusal_names_the_n_cpu_moe_that_fits():
    c = CostModel(get_model("deepseek-v3.1"), get_device("rtx4090d"), CpuMoe(30), CostConfig(host=load_host("xeon-6454s-1s"), dtype="q4_k_m"))
    with pytest.raises(EcoSimError, match=r"on rtx4090d .* would fit: cpu-moe:60 to cpu-moe:61"):
        c.check(1000)
    CostModel(get_model("deepseek-v3.1"), get_device("rtx4090d"), CpuMoe(60), c.config).check(1000)


def test_refusal_names_smaller_gguf_types():
    """Qwen3-30B-A3B holds 30.2e9 weights: 60.4 GB in BF16, 32.1 GB at q8_0, 24.8 GB at q6_k; 90% of 32 GB is 28.8."""
    c = CostModel(get_model("qwen3-30b-a3b"), get_device("h200"), Cpu(), CostConfig(host=host(ram_bytes=32e9)))
    with pytest.raises(EcoSimError, match=r"would fit: --dtype q6_k or q5_k_m or q5_k, or a host with 67 GB"):
        c.check(1000)


def test_a_host_placement_without_a_host_is_one_line():
    with pytest.raises(EcoSimError, match="give --host"):
        CostModel(TINY, get_device("h200"), CpuMoe(), CostConfig())


# ---------------------------------------------------------------------------------- validate's host


def test_a_cpu_calibration_priced_by_the_cpu_placement_is_the_calibration():
    """The committed CPU validation's profile, read as a host, prices any step exactly as the profile did."""
    profile = VALIDATE_RUN / "profile.json"
    doc = json.loads(profile.read_text())
    device = get_device(str(profile))
    model = dataclasses.replace(TINY, expert_bytes=37_700_000)
    a = CostModel(model, device, Hbm(), CostConfig())
    b = CostModel(model, device, Cpu(), CostConfig(host=from_calibration(doc, "x")))
    rng = np.random.default_rng(0)
    u, n, ctx = rng.integers(1, 9, (50, 3)), rng.integers(1, 10, 50), rng.integers(0, 500, 50)
    for spec in (False, True):
        assert b.step_times(u, n, ctx, spec) == pytest.approx(a.step_times(u, n, ctx, spec), rel=1e-12)
    shipped = load_host("validate-cpu")
    assert shipped.bandwidth == doc["hbm_bw"] and shipped.gemv_flops == doc["peak_bf16"] and shipped.overlap == "sum"


# ------------------------------------------------------------------------------------------ the CLI


@pytest.fixture(scope="module")
def ds_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "ds"
    r = ecosim("synth", str(out), "--model", "deepseek-v3.1", "--requests", "2", "--positions", "16")
    assert r.returncode == 0, r.stderr
    return out


def test_replay_cpu_moe_with_a_host_file_and_a_gguf_dtype(ds_trace, tmp_path):
    f = tmp_path / "server.json"
    f.write_text(json.dumps({**load_host("xeon-6454s-2s").to_dict(), "name": "my-server"}))
    r = ecosim("replay", str(ds_trace), "--placement", "cpu-moe", "--host", str(f), "--hardware", "rtx4090d",
               "--dtype", "q4_k_m", "--policy", "ar")
    assert r.returncode == 0, r.stderr
    assert "host my-server (58 MoE layers): 614.4 GB/s" in r.stdout and "dtype q4_k_m" in r.stdout


def test_replay_refuses_every_expert_in_64gb_in_one_line(ds_trace, tmp_path):
    f = tmp_path / "desk.json"
    f.write_text(json.dumps({**load_host("desktop-ddr5-2ch").to_dict(), "name": "desk64", "ram_bytes": 64e9}))
    r = ecosim("replay", str(ds_trace), "--placement", "cpu-moe", "--host", str(f), "--hardware", "rtx4090d",
               "--dtype", "q4_k_m", "--policy", "ar")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "desk64 holds 57.6 GB" in lines[0] and "would fit" not in lines[0]


def test_bad_host_and_dtype_are_one_line_errors(ds_trace):
    r = ecosim("replay", str(ds_trace), "--placement", "cpu-moe", "--host", "nonesuch", "--policy", "ar")
    assert r.returncode == 2 and "unknown host 'nonesuch'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = ecosim("replay", str(ds_trace), "--dtype", "q4_k_x", "--policy", "ar")
    assert r.returncode == 2 and "--dtype" in r.stderr


# ---------------------------------------------------------------------------------- tune's llama.cpp flags


def test_llamacpp_flags_for_the_best_chain_and_the_gain_beyond_it():
    from ecosim.tune_llamacpp import llamacpp

    doc = {"overall_best": "ecospec-auto (token)", "overall_ms_per_token": 40.0, "ar_ms_per_token": 60.0, "auto_ms_per_token": 40.0,
           "vllm": {"num_speculative_tokens": 3, "ms_per_token": 50.0, "speedup_vs_ar": 1.2, "pays": True}}
    ds = get_model("deepseek-v3.1")
    d = llamacpp(doc, CpuMoe(40), ds, "eagle3")
    assert d["flags"] == "-ngl 99 --n-cpu-moe 40 -md eagle3.gguf --draft-max 3 --draft-min 3 --draft-p-min 0"
    assert d["gain_of_preferred"] == pytest.approx(50 / 40)
    assert llamacpp(doc, Hbm(), ds, "eagle3") is None
    no = llamacpp({**doc, "vllm": {**doc["vllm"], "pays": False}}, Cpu(), ds, "eagle3")
    assert no["flags"] == "-ngl 0" and not no["speculate"] and no["gain_of_preferred"] == pytest.approx(60 / 40)


def test_tune_prints_llamacpp_flags_under_cpu_moe(ds_trace):
    r = ecosim("tune", str(ds_trace), "--placement", "cpu-moe:60", "--host", "xeon-6454s-2s", "--hardware", "rtx4090d",
               "--dtype", "q4_k_m", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["llama_cpp"]
    assert d["placement_flags"] == "-ngl 99 --n-cpu-moe 60" and d["flags"].startswith("-ngl 99 --n-cpu-moe 60")


# ------------------------------------------------------------------------------- published host rows


def test_each_engine_profile_is_fitted_on_its_own_rows_and_held_out_rows_meet_the_target():
    from ecosim import fidelity as f
    from ecosim.catalog.serving import load_serving

    rows = [r for r in f.load_rows() if (r.get("sim") or {}).get("profile")]
    res, theta, _ = f.run(load_serving("cuda-graphs"), True, rows)
    by = {x.row["id"]: x for x in res}
    kt = by["kt-dsv3-q4km-1s-8e"].terms
    assert set(kt) == set(f.HOST_FREE) and kt["host_layer_s"] > 0  # KTransformers' own fit, not cuda-graphs'
    assert by["llamacpp-dsv3-q4km-2s"].terms != kt
    s = f.summary(res)
    assert s["host_plain_held_out"]["rows"] >= 5 and s["host_plain_held_out"]["median_abs_error"] <= 0.20
    assert "plain_all" in s and s["plain_all"]["rows"] == 0  # host rows never enter the GPU groups
    for n in (2, 4, 8):  # a forward of n tokens costs more than one and at most n
        assert 1 < by[f"ik1630-glm45air-n{n}"].predicted <= n
    # the shipped profiles hold their fit
    for name in ("ktransformers", "llama.cpp"):
        prof = load_serving(name)
        got = next(x.terms for x in res if x.row["sim"]["profile"] == name)
        assert {k: getattr(prof, k) for k in f.HOST_FREE} == pytest.approx(got)


def test_fidelity_host_reprices_the_host_rows_on_another_host(tmp_path):
    from ecosim import fidelity as f

    rows = [r for r in f.load_rows() if r["id"] in ("kt-dsv3-q4km-1s-8e", "kt-dsv3-q4km-2s-8e")]
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": rows}))
    own = json.loads(ecosim("fidelity", "--table", str(table), "--json", "--no-fit").stdout)
    one = json.loads(ecosim("fidelity", "--table", str(table), "--json", "--no-fit", "--host", "xeon-6454s-1s").stdout)
    p = {x["id"]: x["predicted"] for x in own["rows"]}
    q = {x["id"]: x["predicted"] for x in one["rows"]}
    assert q["kt-dsv3-q4km-1s-8e"] == pytest.approx(p["kt-dsv3-q4km-1s-8e"])  # already on one socket
    assert q["kt-dsv3-q4km-2s-8e"] == pytest.approx(p["kt-dsv3-q4km-1s-8e"])
    assert q["kt-dsv3-q4km-2s-8e"] < p["kt-dsv3-q4km-2s-8e"]
    bad = ecosim("fidelity", "--table", str(table), "--host", "nonesuch")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_synth_says_whether_the_model_fits_a_host(tmp_path):
    r = ecosim("synth", str(tmp_path / "t"), "--model", "qwen3-30b-a3b", "--requests", "1", "--positions", "8",
               "--host", "desktop-ddr5-2ch", "--dtype", "q4_k_m")
    assert r.returncode == 0, r.stderr
    assert "host desktop-ddr5-2ch (86 GB usable): qwen3-30b-a3b (q4_k_m)'s routed experts need 17.5 GB under cpu-moe (fits)" in r.stdout


def test_the_event_engine_prices_host_layers_as_the_fast_one(ds_trace):
    """One request at a time, no prefetch: the des engine's time equals the fast engine's under cpu-moe too."""
    fast = ecosim("replay", str(ds_trace), "--placement", "cpu-moe", "--host", "xeon-6454s-2s", "--hardware", "rtx4090d",
                  "--dtype", "q4_k_m", "--policy", "confidence", "--json")
    des = ecosim("replay", str(ds_trace), "--placement", "cpu-moe", "--host", "xeon-6454s-2s", "--hardware", "rtx4090d",
                 "--dtype", "q4_k_m", "--policy", "confidence", "--json", "--engine", "des")
    assert fast.returncode == 0 and des.returncode == 0, des.stderr
    t = lambda r: next(x["time_s"] for x in json.loads(r.stdout)["totals"] if x["policy"] == "confidence")  # noqa: E731
    assert t(des) == pytest.approx(t(fast), rel=1e-9)


def test_bench_readme_renders_the_host_table():
    from bench.readme import host_tables

    figs = {}
    b = "quality.host.ds.h.cpu-moe.e"
    for k, v in {"ar": 10.0, "confidence_best": 8.0, "auto": 7.0, "llamacpp_default": 9.0, "reference": 6.5}.items():
        figs[f"{b}.{k}_ms_per_token"] = {"value": v, "note": "synthetic, x" if k == "ar" else "budget 4"}
    for k, v in {"auto_over_confidence": 8 / 7, "auto_over_ar": 10 / 7, "auto_of_reference": 6.5 / 7}.items():
        figs[f"{b}.{k}"] = {"value": v, "met": None}
    m = "quality.host.mean.e"
    for k, v in {"auto_over_confidence": 1.2, "auto_over_ar_min": 1.1, "auto_of_reference_min": 0.93,
                 "confidence_over_ar": 1.25, "auto_over_llamacpp": 1.3}.items():
        figs[f"{m}.{k}"] = {"value": v, "met": True if "auto" in k and k != "auto_over_llamacpp" else None,
                            "note": "over 1 configurations"}
    text = "\n".join(host_tables(figs))
    assert "| ds.h.cpu-moe.e (synthetic) | 10 | 8 (budget 4) | 7 | 9 (budget 4) | 6.5 | 1.143x | 1.429x | 0.929 |" in text
    assert "| e | 1 | 1.200x (met) | 1.100x (met) | 0.930 (met) | 1.250x | 1.300x |" in text
