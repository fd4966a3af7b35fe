"""`ecosim fidelity` and its published-measurements table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from ecosim.catalog.serving import load_serving
from ecosim.errors import EcoSimError
from ecosim.fidelity import FREE, PLAIN, at_dtype, load_rows, run
from ecosim.catalog.models import get_model

ROWS = load_rows()


def ecosim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ), timeout=900)


def test_every_row_has_a_url_a_quote_and_says_how_it_is_predicted_or_why_not():
    assert len(ROWS) >= 50 and len({r["id"] for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r["url"].startswith("https://") and r["quote"], r["id"]
        assert (r["sim"] is None) == bool(r.get("not_predicted")), r["id"]
        if r["sim"]:
            assert {"model", "hardware", "placement", "dtype", "context"} <= set(r["sim"])
    fit = [r for r in ROWS if r["fit"]]
    assert fit and all(r["metric"] in (*PLAIN, "spec_tok_s") and r["sim"] for r in fit)


def test_a_table_row_without_a_url_is_refused(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"rows": [{**ROWS[0], "url": ""}]}))
    with pytest.raises(EcoSimError, match="url"):
        load_rows(bad)


def test_dtype_rescales_expert_bytes():
    m = get_model("gpt-oss-120b")
    assert at_dtype(m, "bf16").expert_bytes == m.expert_params * 2
    assert at_dtype(m, "mxfp4").expert_bytes == m.expert_bytes
    q = get_model("qwen3-30b-a3b")
    assert at_dtype(q, "fp8").dense_bytes < q.dense_bytes and at_dtype(q, "fp8").bytes_per_param == 1.0


def test_block_fp8_adds_one_activation_quantisation_kernel_per_quantised_gemm():
    # Qwen3 (GQA, no shared expert) per layer: 5 + 7 = 12 kernels; FP8 adds qkv, o, gate/up, down: 16
    q = get_model("qwen3-30b-a3b")
    assert q.kernels_per_layer(True) == 12 and at_dtype(q, "fp8").kernels_per_layer(True) == 16
    assert at_dtype(q, "fp8").kernels_per_step == 48 * 16 and at_dtype(q, "bf16").kernels_per_step == 48 * 12
    # DeepSeek (MLA, one shared expert): MoE layer 10 + 7 + 3 = 20, FP8 + q_a, q_b, kv_a, o, the two absorbed bmm's
    # + 2 routed + 2 shared = 30; dense layer 10 + 4 = 14, FP8 + 6 + 2 = 22; 58 MoE and 3 dense layers
    d = at_dtype(get_model("deepseek-v3.1"), "fp8")
    assert (d.kernels_per_layer(True), d.kernels_per_layer(False)) == (30, 22)
    assert d.kernels_per_step == 58 * 30 + 3 * 22
    # TensorRT-LLM fuses the NVFP4 activation quantisation into its all-reduce + RMSNorm kernel: no extra kernel
    assert at_dtype(get_model("deepseek-v3.1"), "nvfp4").kernels_per_step == 58 * 20 + 3 * 14
    assert "act_quant" not in q.to_manifest() and d.to_manifest()["act_quant"] is True


def test_no_fit_uses_the_profile_as_shipped():
    plain = [r for r in ROWS if r["sim"] and (r["metric"] in PLAIN or r["fit"])]
    base = load_serving("cuda-graphs")
    shipped, theta, _ = run(base, fit=False, rows=plain)
    assert list(theta) == [getattr(base, k) for k in FREE]
    refit, theta2, _ = run(base, fit=True, rows=plain)
    assert np.allclose(theta, theta2, rtol=1e-6, atol=1e-12)  # the shipped profile is the fit
    assert [x.predicted for x in shipped] == pytest.approx([x.predicted for x in refit], rel=1e-6)


@pytest.fixture(scope="module")
def report() -> dict:
    r = ecosim("fidelity", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_every_predictable_row_is_predicted(report):
    want = {r["id"] for r in ROWS if r["sim"]}
    assert {x["id"] for x in report["rows"]} == want
    assert {x["id"] for x in report["not_predicted"]} == {r["id"] for r in ROWS if not r["sim"]}
    fits: dict[object, int] = {}  # fit rows per engine profile (rows with experts in host memory are fitted apart)
    for r in ROWS:
        if r["sim"] and r["fit"]:
            fits[r["sim"].get("profile")] = fits.get(r["sim"].get("profile"), 0) + 1
    for x in report["rows"]:
        assert math.isfinite(x["predicted"]) and x["predicted"] > 0, x["id"]
        assert x["error"] == pytest.approx(x["predicted"] / x["published"] - 1)
        assert (x["loo_error"] is not None) == (x["fit"] and fits[x["sim"].get("profile")] > 1), x["id"]
        if x["sim"].get("accept_len"):
            assert x["synthetic_accept_len"] == pytest.approx(x["sim"]["accept_len"], abs=0.25), x["id"]


@pytest.mark.slow
def test_the_shipped_profile_is_the_fit_on_the_declared_rows(report):
    prof = load_serving("cuda-graphs")
    for k in FREE:
        assert report["theta"][k] == pytest.approx(getattr(prof, k), rel=1e-6, abs=1e-12)
    assert set(prof.fitted_on) == {r["id"] for r in ROWS if r["fit"] and not r["sim"].get("profile")}


@pytest.mark.slow
def test_summary_counts_the_rows(report):
    s = report["summary"]
    plain = [x for x in report["rows"] if x["metric"] in PLAIN and not x["separate"] and not x["sim"].get("profile")]
    assert s["plain_all"]["rows"] == len(plain)
    assert {x["id"] for x in s["separate"]} == {x["id"] for x in report["rows"] if x["separate"]}
    assert s["plain_held_out"]["rows"] + s["plain_fit_set"]["rows"] == len(plain)
    errs = sorted(abs(x["error"]) for x in plain)
    assert s["plain_all"]["worst_abs_error"] == pytest.approx(errs[-1])
    assert s["plain_all"]["within_30pct"] == sum(e <= 0.30 for e in errs)


def test_refuses_to_overwrite_a_profile(tmp_path):
    p = tmp_path / "p.json"
    p.write_text("{}")
    r = ecosim("fidelity", "--write-profile", str(p))
    assert r.returncode == 2 and p.read_text() == "{}" and len(r.stderr.strip().splitlines()) == 1


def test_a_row_declares_its_engine_terms_and_the_host_sync_is_free_only_there():
    from ecosim.fidelity import FREE, _costs
    row = next(r for r in ROWS if r["id"] == "specforge339-30ba3b-eagle3-s3k1n4-toks")
    assert row["sim"]["serving"] == {"spec_overlap": False} and row["fit"]
    shape = at_dtype(get_model(row["sim"]["model"]), row["sim"]["dtype"])
    base = load_serving("cuda-graphs")
    costs = _costs(shape, row["sim"], base, int(row["sim"]["depth"]))
    sync = costs[1 + FREE.index("spec_sync_s")]  # the unit vector of spec_sync_s: its draft time minus theta = 0's is 1 s
    assert not costs[0].terms.spec_overlap and sync.draft_time(True) - costs[0].draft_time(True) == pytest.approx(1.0)
    v2 = _costs(shape, {**row["sim"], "serving": {}}, base, int(row["sim"]["depth"]))
    assert v2[1 + FREE.index("spec_sync_s")].draft_time(True) == pytest.approx(v2[0].draft_time(True))  # overlapped: hidden


def test_a_row_of_an_older_release_declares_its_extra_kernels_and_pays_each_the_tiny_kernel_cost():
    from ecosim.fidelity import FREE, _costs
    row = next(r for r in ROWS if r["id"] == "sglang5513-r1-h20x8-plain-bs1")
    assert row["sim"]["serving"] == {"extra_layer_kernels": 63} and not row["fit"]
    shape = at_dtype(get_model(row["sim"]["model"]), row["sim"]["dtype"])
    base = load_serving("cuda-graphs")
    old = _costs(shape, row["sim"], base, 0)
    new = _costs(shape, {**row["sim"], "serving": {}}, base, 0)
    assert old[0].kernels - new[0].kernels == 61 * 63  # on each of DeepSeek's 61 decoder layers
    # each at the profile's tiny-kernel cost, whatever the fitted kernel latency (theta = 0 and its unit vector)
    tau = 1 + FREE.index("kernel_latency_s")
    for i in (0, tau):
        assert old[i].step_overhead - new[i].step_overhead == pytest.approx(61 * 63 * base.extra_kernel_s)
    assert base.extra_kernel_s == pytest.approx(2.06e-6)


def test_a_row_spanning_nodes_prices_every_collective_on_the_inter_node_link():
    from ecosim.catalog.devices import get_device
    from ecosim.fidelity import _costs
    row = next(r for r in ROWS if r["id"] == "tt356-r1-16xh100-sglang-isl128")
    assert row["sim"]["nodes"] == 2 and row["sim"]["placement"] == "tp:16" and "link_latency_s" not in row["sim"]
    shape = at_dtype(get_model(row["sim"]["model"]), row["sim"]["dtype"])
    base = load_serving("cuda-graphs")
    h100 = get_device("h100")
    two = _costs(shape, row["sim"], base, 0)[0]  # theta = 0: no fitted collective latency
    one = _costs(shape, {**row["sim"], "nodes": 1}, base, 0)[0]
    # by hand, a dense layer's two all-reduces of one token of h = 7168 BF16 values over 16 devices:
    # 2 x (42.4 us + 2 x 15/16 x 7168 x 2 B / 50 GB/s) across nodes; over NVLink 2 x (0 + ... / 450 GB/s)
    h = shape.hidden_size
    assert h100.internode_latency_s == 42.4e-6 and h100.internode_link_bw == 50e9
    want = 2 * (42.4e-6 + 2 * 15 / 16 * h * 2 / 50e9)
    assert two.collective_time(np.ones(1), moe=False)[0] == pytest.approx(want)
    assert one.collective_time(np.ones(1), moe=False)[0] == pytest.approx(2 * (2 * 15 / 16 * h * 2 / h100.link_bw))
    assert "internode_latency_s" not in h100.to_dict()  # prices nothing on one node: sweep ids unchanged


def test_nodes_on_a_device_without_an_inter_node_link_is_a_one_line_error():
    from ecosim.fidelity import _costs
    row = next(r for r in ROWS if r["id"] == "tt356-r1-16xh100-sglang-isl128")
    sim = {**row["sim"], "hardware": "h200"}
    shape = at_dtype(get_model(sim["model"]), sim["dtype"])
    with pytest.raises(EcoSimError, match="inter-node"):
        _costs(shape, sim, load_serving("cuda-graphs"), 0)


@pytest.mark.parametrize("change, match", [
    ({"separate": ""}, "separate"), ({"separate": 3}, "separate"), ({"separate": "why", "fit": True}, "separate"),
    ({"sim": {"nodes": 0}}, "nodes"), ({"sim": {"nodes": "2"}}, "nodes"),
])
def test_separate_and_nodes_are_checked(tmp_path, change, match):
    row = next(r for r in ROWS if r["sim"] and not r["fit"])
    bad = {**row, **change}
    if "sim" in change:
        bad["sim"] = {**row["sim"], **change["sim"]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"rows": [bad]}))
    with pytest.raises(EcoSimError, match=match):
        load_rows(path)


def test_separate_rows_are_summarised_apart():
    from ecosim.fidelity import Result, summary
    row = next(r for r in ROWS if r["metric"] in PLAIN and r["sim"] and not r["fit"] and not r.get("separate"))
    kept = Result({**row, "id": "a"}, 1.0, 0.10, None, None)
    apart = Result({**row, "id": "b", "separate": "the source calls it unoptimised"}, 1.0, 0.90, None, None)
    s = summary([kept, apart])
    assert s["plain_all"]["rows"] == 1 and s["plain_all"]["worst_abs_error"] == pytest.approx(0.10)
    assert s["separate"] == [{"id": "b", "metric": row["metric"], "error": 0.90, "why": "the source calls it unoptimised"}]
    marked = [r for r in ROWS if r.get("separate")]
    assert [r["id"] for r in marked] == ["trtllm-r1-b200-baseline-ep8tp8-bs1"] and "67" in marked[0]["separate"]


def test_cli_refuses_nodes_on_a_device_without_an_inter_node_link(tmp_path):
    row = json.loads(json.dumps(next(r for r in ROWS if r["id"] == "tt356-r1-16xh100-sglang-isl128")))
    row["sim"]["hardware"], row["fit"] = "h200", True
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": [row]}))
    r = ecosim("fidelity", "--table", str(table))
    assert r.returncode == 2 and "inter-node" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_markdown_links_every_row_to_its_source_and_ends_with_the_summary(tmp_path):
    rows = [r for r in ROWS if r["id"] in ("specdrift-gptoss20b-h100-plain-bs1", "baseten-mixtral-a100-int8-bs1")]
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": rows}))
    r = ecosim("fidelity", "--table", str(table), "--markdown")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "| row | setting | metric | published | predicted | error |"
    body = [x for x in lines if x.startswith("| [")]
    assert [x.split("]")[0][3:] for x in body] == [x["id"] for x in rows]
    assert all(f"]({x['url']})" in line for x, line in zip(rows, body))
    assert "(fit)" in body[0] and "(fit)" not in body[1]  # the fit set is marked
    assert lines[-1] == "```" and any(x.startswith("plain batch-1 decode, every row: 2 rows") for x in lines)


@pytest.mark.parametrize("serving, why", [({"extra_layer_kernels": -40}, "non-negative"), ({"extra_kernels": 3}, "serving-profile terms"),
                                          ({"extra_layer_kernels": "many"}, "numbers")])
def test_cli_refuses_a_row_whose_engine_terms_are_not_a_profiles(tmp_path, serving, why):
    row = json.loads(json.dumps(next(r for r in ROWS if r["id"] == "sglang5513-r1-h20x8-plain-bs1")))
    row["sim"]["serving"] = serving
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": [row]}))
    r = ecosim("fidelity", "--table", str(table))
    assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_speculative_rows_route_as_the_shapes_preset_and_refuse_a_shape_without_one(monkeypatch, tmp_path):
    """Speculative rows use routing as realistic as the generator can make it: a verified tree's union
    is the shape's calibrated preset's, not the generator's unfitted defaults."""
    import ecosim.fidelity as fid
    from ecosim.routing.presets import preset_knobs
    cfg = fid._synth({"model": "qwen3-30b"}, True, requests=2, depth=3, topk=3)
    k = preset_knobs("qwen3-30b-a3b")
    assert cfg.preset.startswith("preset qwen3-30b-a3b:") and (cfg.depth, cfg.topk) == (3, 3)
    assert (cfg.token_affinity, cfg.parent_affinity, cfg.context, cfg.skew, cfg.context_share) == \
        (k.token_affinity, k.parent_affinity, k.context, k.skew, k.context_share)
    monkeypatch.setattr(fid, "shipped_preset", lambda shape: None)
    with pytest.raises(EcoSimError, match="no routing preset"):
        fid._synth({"model": "qwen3-30b"}, True, requests=2)
    assert fid._synth({"model": "qwen3-30b"}, False, requests=2).preset == ""  # one token a step: its top-k whatever the knobs


def test_the_eager_profile_is_the_cuda_graph_step_times_the_published_7_22x():
    """eager.json's kernel latency is derived, not fitted: it makes the TensorRT-LLM DeepSeek-R1 batch-1
    step (1202 kernels) 7.22x its cuda-graphs step, the speedup TensorRT-LLM's tech blog 2 gives CUDA graphs."""
    from ecosim.fidelity import price_row
    row = next(r for r in ROWS if r["id"] == "trtllm-r1-b200-nomtp-bs1")
    graphs, eager = load_serving("cuda-graphs"), load_serving("eager")
    p = price_row(row, graphs).plain_token
    at = {name: p.at(np.array([getattr(prof, k) for k in FREE])) for name, prof in (("graphs", graphs), ("eager", eager))}
    assert at["eager"] / at["graphs"] == pytest.approx(7.22, rel=0.01)
    for k in ("step_fixed_s", "collective_latency_s", "spec_level_s", "spec_sync_s"):  # "as cuda-graphs (fitted there)"
        assert getattr(eager, k) == getattr(graphs, k)


def test_a_users_table_predicts_a_model_outside_the_catalogue_from_its_config_and_preset(tmp_path):
    """A row's sim.model may be a Hugging Face config.json and sim.preset a routing preset, both relative to
    the table: a plain row of a Qwen1.5-MoE-like model is priced from its config, and its speculative row
    routes as the named preset; without a preset, the speculative row is refused in one line."""
    from ecosim.routing.presets import preset_path
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "num_experts": 60, "num_experts_per_tok": 4,
           "hidden_size": 2048, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
           "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936,
           "dtype": "bfloat16"}
    (tmp_path / "qwen1.5-moe").mkdir()
    (tmp_path / "qwen1.5-moe" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "p.json").write_text(preset_path("qwen3-30b-a3b").read_text())  # a stand-in preset
    base = {"url": "https://example.org/made-up-for-a-test", "quote": "-", "fit": False}
    sim = {"model": "qwen1.5-moe", "hardware": "h100", "placement": "hbm", "dtype": "bf16", "context": 256}
    plain = {**base, "id": "plain", "metric": "decode_tok_s", "value": 100.0, "sim": sim}
    spec = {**base, "id": "spec", "metric": "spec_speedup", "value": 1.2,
            "sim": {**sim, "preset": "p.json", "depth": 3, "topk": 1, "verified": 4, "accept_len": 2.5}}
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"rows": [plain, spec]}))
    r = ecosim("fidelity", "--table", str(table), "--no-fit", "--json")
    assert r.returncode == 0, r.stderr
    got = {x["id"]: x for x in json.loads(r.stdout)["rows"]}
    assert got["plain"]["predicted"] > 0 and got["spec"]["predicted"] > 0
    assert got["spec"]["synthetic_accept_len"] == pytest.approx(2.5, abs=0.25)
    deeper = tmp_path / "deeper"
    deeper.mkdir()
    (deeper / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 48}))
    table2 = tmp_path / "t2.json"
    table2.write_text(json.dumps({"rows": [{**plain, "metric": "decode_ms_per_token", "value": 5.0,
                                            "sim": {**sim, "model": "deeper"}}, {**plain, "metric": "decode_ms_per_token",
                                                                                  "id": "p24", "value": 5.0}]}))
    ms = {x["id"]: x["predicted"] for x in json.loads(ecosim("fidelity", "--table", str(table2), "--no-fit", "--json").stdout)["rows"]}
    assert 1.8 < ms["plain"] / ms["p24"] < 2.05  # 48 layers against 24: the layers' reads and kernels double, the LM head not
    md = ecosim("fidelity", "--table", str(table), "--no-fit", "--markdown").stdout
    assert "| qwen1.5-moe bf16, h100 hbm |" in md and str(tmp_path) not in md  # the shape's name, not its path
    spec["sim"].pop("preset")
    table.write_text(json.dumps({"rows": [plain, spec]}))
    r = ecosim("fidelity", "--table", str(table), "--no-fit")
    assert r.returncode == 2 and "no routing preset" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _user_table(tmp_path, sim_model, where=None):
    where = where or tmp_path
    t = where / "t.json"
    t.write_text(json.dumps({"rows": [{"id": "r", "url": "https://example.org/x", "metric": "decode_tok_s", "value": 1.0,
                                       "fit": False, "sim": {"model": sim_model, "hardware": "h100", "placement": "hbm",
                                                             "dtype": "bf16", "context": 64}}]}))
    return t


def test_a_rows_model_path_is_the_tables_never_the_working_directorys(tmp_path, monkeypatch):
    """A relative sim.model is looked up beside the table only: a same-named folder in the working directory is
    not used, a missing one is one line naming the table and the row, and a catalogue name wins over a folder
    of the same name beside the table."""
    cfg = {"model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
           "vocab_size": 128}
    for d in (tmp_path / "tiny-moe", tmp_path / "sub" / "qwen3-30b-a3b"):
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EcoSimError, match=r"t\.json: row 'r': sim\.model 'tiny-moe': no such file or folder beside the table"):
        load_rows(_user_table(tmp_path, "tiny-moe", tmp_path / "sub"))
    rows = load_rows(_user_table(tmp_path, "qwen3-30b-a3b", tmp_path / "sub"))
    assert "_model" not in rows[0]["sim"]  # the catalogue's Qwen3-30B-A3B, not the 4-expert folder beside it
    rows = load_rows(_user_table(tmp_path, "tiny-moe"))
    assert rows[0]["sim"]["model"] == "tiny-moe" and rows[0]["sim"]["_model"] == str((tmp_path / "tiny-moe").resolve())
    (tmp_path / "tiny-moe" / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 0}))
    with pytest.raises(EcoSimError, match="row 'r': .*num_attention_heads must be at least 1"):
        load_rows(_user_table(tmp_path, "tiny-moe"))
    r = ecosim("fidelity", "--table", str(_user_table(tmp_path, "nowhere")))
    assert r.returncode == 2 and "no such file or folder beside the table" in r.stderr and len(r.stderr.strip().splitlines()) == 1
