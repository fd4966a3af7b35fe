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
    for x in report["rows"]:
        assert math.isfinite(x["predicted"]) and x["predicted"] > 0, x["id"]
        assert x["error"] == pytest.approx(x["predicted"] / x["published"] - 1)
        assert (x["loo_error"] is not None) == x["fit"], x["id"]
        if x["sim"].get("accept_len"):
            assert x["synthetic_accept_len"] == pytest.approx(x["sim"]["accept_len"], abs=0.25), x["id"]


@pytest.mark.slow
def test_the_shipped_profile_is_the_fit_on_the_declared_rows(report):
    prof = load_serving("cuda-graphs")
    for k in FREE:
        assert report["theta"][k] == pytest.approx(getattr(prof, k), rel=1e-6, abs=1e-12)
    assert set(prof.fitted_on) == {r["id"] for r in ROWS if r["fit"]}


@pytest.mark.slow
def test_summary_counts_the_rows(report):
    s = report["summary"]
    plain = [x for x in report["rows"] if x["metric"] in PLAIN]
    assert s["plain_all"]["rows"] == len(plain)
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
