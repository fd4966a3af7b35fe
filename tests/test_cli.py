"""The ecosim command line end to end: real subprocesses, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, hand_trace, tiny_trace
from ecosim.catalog.serving import load_serving
from ecosim.trace.io import write_trace

ROW_KEYS = {"trace", "requests", "tokens", "steps", "tokens_per_step", "experts_per_step", "expert_bytes_per_token",
            "time_s", "time_per_token_s", "speedup_vs_ar", "oracle_fraction"}


def ecosim(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("traces")
    write_trace(d / "a", *tiny_trace(11))
    write_trace(d / "nested" / "b", *tiny_trace(12, requests=3))
    return d


def test_replay_json_matches_the_documented_schema(traces):
    r = ecosim("replay", str(traces), "--policy", "confidence", "--budget", "8", "--bw", "3.3TB/s", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"hardware", "placement", "cost_mode", "engine", "used", "not_modelled", "rows", "totals"} <= set(out)
    assert out["hardware"]["hbm_bw"] == 3.3e12
    assert [(t["trace"], t["policy"]) for t in out["rows"]] == [("a", "confidence"), ("b", "confidence")]
    for row in out["rows"] + out["totals"]:
        assert ROW_KEYS <= set(row)
        assert row["budget"] == 8 and not {"lambda", "predictor", "score"} & set(row)  # knobs confidence does not use
    [total] = out["totals"]
    assert total["tokens"] == sum(t["tokens"] for t in out["rows"]) == 2 * 40 + 3 * 40
    assert total["steps"] == sum(t["steps"] for t in out["rows"])
    assert total["tokens_per_step"] == pytest.approx(total["tokens"] / total["steps"])
    assert total["tokens_per_s"] == pytest.approx(total["tokens"] / total["time_s"])


def test_replay_prints_the_values_it_used_never_null(traces):
    """The values applied (the cuda-graphs serving profile's, the draft time) are printed, in the JSON and
    under the table. (The defaults are the shipped profile's, not constants in code.)"""
    prof = load_serving("cuda-graphs")
    r = ecosim("replay", str(traces / "a"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    used = out["used"]
    assert used["serving"] == "cuda-graphs" and used["bw_efficiency"] == prof.bw_efficiency
    assert used["step_overhead_s"] == pytest.approx(prof.step_fixed_s + used["kernels_per_step"] * prof.kernel_latency_s)
    assert used["compute_efficiency"] == prof.compute_efficiency and used["overlap"] == "max" and used["draft_time_s"]["a"] >= 0
    assert None not in out["hardware"].values() and None not in used.values()
    r = ecosim("replay", str(traces / "a"), "--step-overhead", "45us", "--bw-efficiency", "0.7")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("used: "))
    assert "bw eff 0.7" in line and f"compute eff {prof.compute_efficiency:.3g}" in line and "step fixed 45 us" in line
    assert "tokens/s" in r.stdout


def test_replay_json_without_policy_is_one_flat_list_of_rows(traces):
    r = ecosim("replay", str(traces), "--predictor", "oracle", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "compare" not in out
    side_by_side = ["ar", "confidence", "ecospec", "ecospec-auto", "evict", "cascade", "eagle2-default",
                    "sglang-default", "vllm-chain", "oracle"]  # every registered policy, the bound last
    assert [(t["trace"], t["policy"]) for t in out["rows"]] == [(t, p) for t in ("a", "b") for p in side_by_side]
    assert [t["policy"] for t in out["totals"]] == side_by_side
    by = {t["policy"]: t for t in out["totals"]}
    assert set(by["ecospec"]) >= {"budget", "lambda", "predictor", "score"} and by["ecospec"]["predictor"] == "oracle"
    assert not {"budget", "lambda", "predictor", "score"} & (set(by["ar"]) | set(by["oracle"]))
    for p, t in by.items():
        assert t["tokens"] == sum(x["tokens"] for x in out["rows"] if x["policy"] == p)
    assert all(x["draft_time_s"] == 0.0 for x in out["rows"] if x["policy"] == "ar")


def test_replay_without_policy_prints_the_side_by_side_table(traces):
    r = ecosim("replay", str(traces), "--bw", "3.3TB/s")
    assert r.returncode == 0, r.stderr
    for word in ("ar", "confidence b=16", "ecospec", "oracle", "synthetic", "total", "not modelled"):
        assert word in r.stdout


def test_des_engine_writes_a_chrome_timeline(traces, tmp_path):
    tl = tmp_path / "timeline.json"
    r = ecosim("replay", str(traces / "a"), "--policy", "ecospec", "--engine", "des", "--placement", "ep:4",
               "--timeline", str(tl), "--json")
    assert r.returncode == 0, r.stderr
    events = json.loads(tl.read_text())["traceEvents"]
    assert {e["tid"] for e in events} >= {"device 0", "device 3", "link", "step"}


def test_synth_check_inspect(tmp_path):
    out = tmp_path / "ds"
    r = ecosim("synth", str(out), "--model", "olmoe-1b-7b", "--requests", "2", "--positions", "30", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["synthetic"] is True
    assert ecosim("check", str(out)).stdout.startswith(f"{out}: ok (synthetic, olmoe-1b-7b")
    info = json.loads(ecosim("inspect", str(out), "--json").stdout)[0]
    assert info["positions"] == 60 and info["model"] == "olmoe-1b-7b" and info["synthetic"] is True
    assert ecosim("inspect", str(out)).returncode == 0


BAD = [
    (["replay", "/nonexistent"], "no such file"),
    (["replay", "{t}", "--bw", "3.3"], "not a quantity with a unit"),
    (["replay", "{t}", "--bw", "3.3TB"], "wrong dimension"),
    (["replay", "{t}", "--policy", "greedy"], "unknown policy"),
    (["replay", "{t}", "--budget", "-1"], "budget must be in [0, 32766]"),
    (["replay", "{t}", "--lambda", "-0.5"], "lambda must be"),
    (["replay", "{t}", "--placement", "ep:0"], "placement"),
    (["replay", "{t}", "--hardware", "tpu9"], "unknown hardware"),
    (["replay", "{t}", "--predictor", "crystal-ball"], "unknown predictor"),
    (["replay", "{t}", "--engine", "warp"], "--engine"),
    (["replay", "{t}", "--timeline", "x.json"], "need --engine des"),
    (["replay", "{t}", "--engine", "des", "--arrivals", "poisson:-3"], "rate"),
    (["replay", "{t}", "--no-such-flag"], "No such option"),
    (["synth", "{tmp}/s", "--model", "gpt-9"], "unknown model shape"),
    (["synth", "{tmp}/s", "--requests", "0"], "requests"),
    (["check", "{tmp}"], "no traces under it"),
]


@pytest.mark.parametrize("args,why", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(traces, tmp_path, args, why):
    r = ecosim(*[a.format(t=traces / "a", tmp=tmp_path) for a in args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "Traceback" not in r.stderr


def test_ecosim_runs_without_torch(tmp_path):
    """ecosim installs without torch: block the import and run a whole replay."""
    write_trace(tmp_path / "h", *hand_trace())
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('torch', 'transformers'):\n"
        "        raise ImportError('torch is blocked in this test')\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "from ecosim.cli import main\n"
        f"rc = main(['replay', {str(tmp_path / 'h')!r}, '--predictor', 'oracle', '--json'])\n"
        "assert 'torch' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["totals"][0]["tokens"] == 3


def test_no_module_of_ecosim_imports_torch():
    for path in (ROOT / "ecosim").rglob("*.py"):
        text = path.read_text()
        assert "import torch" not in text and "from torch" not in text, path
        assert "import transformers" not in text, path
