"""`validate device-check`: every phase on tiny models on the CPU, the environment check, the budget plan."""

from __future__ import annotations

import json

import pytest
import torch

from validate.cli import main
from validate.devicecheck.environment import EnvironmentMissing, check_environment
from validate.devicecheck.plan import make_plan, resize
from validate.devicecheck.targets import weight_bytes

PHASES = ["build", "record", "recompute", "calibrate", "run"]


def test_small_cpu_check_runs_every_phase(tmp_path, capsys):
    out = tmp_path / "dc"
    assert main(["device-check", "--device", "cpu", "--small", "--out", str(out), "--budget-s", "90"]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "device check passed" in printed and "small True" in printed  # the values it used, then the verdict
    doc = json.loads((out / "summary.json").read_text())
    assert doc["passed"] and doc["environment"]["device_kind"] == "cpu" and doc["environment"]["torch"] == torch.__version__
    assert [(p["phase"], p["status"]) for p in doc["phases"]] == \
        [("environment", "passed")] + [(ph, "passed") for ph in PHASES] * 2
    assert set(doc["targets"]) == {"tiny qwen3_moe", "tiny gpt_oss"}
    for t in doc["targets"].values():
        assert t["record"]["check"] == "ok" and t["record"]["positions"] == t["plan"]["prompts"] * t["plan"]["tokens"]
        r = t["recompute"]
        assert r["nodes"] >= 2 and r["target_next_equal"] == r["nodes"] and r["experts_equal"] == r["nodes"]
        assert r["max_logprob_diff"] < 1e-3
        f = t["calibrate"]["fit"]
        assert f["draft_time_s"] > 0 and f["cases"] == t["calibrate"]["cases"]
        steps = t["calibrate"]["steps"]
        assert [s["tokens"] for s in steps] == [1, 4, 4, 8, 8] and all(s["eager_ms"] > 0 and s["graph_ms"] is None for s in steps)
        assert t["calibrate"]["graph_notes"] == ["not a CUDA device: CUDA graphs not measured"]
        run = t["run"]
        assert run["lossless"] and [p["label"].split()[0] for p in run["policies"]] == ["ecospec-auto", "ar", "confidence"]
        for p in run["policies"]:
            assert p["measured_ms_per_token"] > 0 and p["simulated_ms_per_token"] > 0
            assert p["error_pct"] == pytest.approx(100 * (p["simulated_ms_per_token"] / p["measured_ms_per_token"] - 1))
    md = (out / "summary.md").read_text()
    assert md.startswith("# Device check: PASSED") and "| ar |" in md and "CUDA graph ms" in md
    # the folder is not replaced without --force
    assert main(["device-check", "--device", "cpu", "--small", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_stops_at_phase_1(tmp_path, capsys):
    out = tmp_path / "dc"
    assert main(["device-check", "--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("validate: error: ") and "CUDA" in err, err
    doc = json.loads((out / "summary.json").read_text())
    assert [(p["phase"], p["status"]) for p in doc["phases"]] == [("environment", "failed")] and not doc["passed"]


def test_environment_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EnvironmentMissing, match="no CUDA device is visible"):
        check_environment("cuda", 0.0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(EnvironmentMissing, match="only 1 CUDA device"):
        check_environment("cuda:1", 0.0)

    class Props:
        name, major, minor = "H100", 9, 0

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (4 * 2**30, 80 * 2**30))
    with pytest.raises(EnvironmentMissing, match="4.0 GiB free, the targets need about 6.1 GiB"):
        check_environment("cuda", 6.58e9)
    env = check_environment("cuda", 1e9)
    assert env["device"] == "H100" and env["free_bytes"] == 4 * 2**30


def test_weight_bytes_by_hand():
    # Qwen3-30B-A3B layer: 128 experts x 3 x 2048 x 768 + attention 2048 x 128 x (2 x 32 + 2 x 4), bf16, 2 layers
    assert weight_bytes("qwen3-30b-a3b", 2, 2.0) == 2 * (128 * 3 * 2048 * 768 + 2048 * 128 * 72) * 2
    # gpt-oss-20b: 32 experts x 3 x 2880 x 2880 + 2880 x 64 x (2 x 64 + 2 x 8)
    assert weight_bytes("gpt-oss-20b", 2, 2.0) == 2 * (32 * 3 * 2880 * 2880 + 2880 * 64 * 144) * 2


def test_plan_shrinks_to_its_share():
    tree = dict(depth=3, topk=3, max_nodes=10)
    # record's share: 20% of 10 s at 0.1 s a step = 20 positions: 4 x 32 -> tokens 16, 8, 4 (16 positions fit)
    p = make_plan(10.0, 0.1, prompts=4, tokens=32, sample=16, tree=tree, small=True, seed=0)
    assert (p.prompts, p.tokens) == (4, 4)
    p = make_plan(5.0, 0.1, prompts=4, tokens=32, sample=16, tree=tree, small=True, seed=0)
    assert (p.prompts, p.tokens) == (2, 4)  # 10 positions: tokens down to 4, then prompts down to 2
    # recompute's share: 5% of 5 s = 2.5 steps, a node half a step: 5 nodes
    assert p.sample == 5 and p.budget == 4 and p.calib_tokens == (1, 2, 3, 4, 5)
    # plenty of time: the caps (5 calibration repeats, 3 decoding repeats)
    p = make_plan(1e6, 0.01, prompts=4, tokens=6, sample=6, tree=tree, small=True, seed=0)
    assert (p.calib_repeats, p.repeats, p.sample) == (5, 3, 6)
    # after the recording: 75 s left at 0.05 s a step; run: 40/75 of it = 800 steps over 24 positions x 4 -> 7.8 -> 3;
    # calibrate: 35/75 of it = 700 steps, 0.8 x 700 / (2 x 18 cases) = 15.6 -> 5
    resize(p, 75.0, 0.05)
    assert (p.calib_repeats, p.repeats) == (5, 3)
    resize(p, 3.0, 0.05)  # little left: one repeat each
    assert (p.calib_repeats, p.repeats) == (1, 1)


@pytest.mark.parametrize("name,cls", [("qwen3-30b-a3b", "Qwen3MoeForCausalLM"), ("gpt-oss-20b", "GptOssForCausalLM")])
def test_full_targets_have_the_catalogue_layer_sizes(name, cls):
    """Built on the meta device (no memory): the class the tracer loads, the catalogue's per-layer sizes."""
    from transformers import AutoModelForCausalLM

    from ecosim.catalog.models import get_model
    from tracer.routing import RouterCapture
    from tracer.shape import model_shape
    from validate.devicecheck.targets import full_config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(full_config(name, 2), dtype=torch.bfloat16, attn_implementation="eager")
    cap = RouterCapture(model)
    got, want = model_shape(model, name, cap.moe_layers, cap.top_k, name), get_model(name)
    assert type(model).__name__ == cls and got.num_moe_layers == 2
    for field in ("num_experts", "top_k", "hidden_size", "moe_intermediate_size"):
        assert getattr(got, field) == getattr(want, field), field
    # bf16 weights: 2 bytes a parameter (gpt-oss's experts add their biases, and ship in MXFP4 instead)
    assert got.expert_bytes == want.expert_params * 2 + (3 * 2880 if cls == "GptOssForCausalLM" else 0) * 2


def test_a_failed_phase_is_recorded_and_exits_1(tmp_path, capsys, monkeypatch):
    """A phase that fails is one line in the summary; what needs it is skipped, the rest still runs."""
    from validate.devicecheck import phases

    def broken(*args, **kwargs):
        raise RuntimeError("the device fell over\nsecond line")

    monkeypatch.setattr(phases, "calibrate_phase", broken)
    out = tmp_path / "dc"
    assert main(["device-check", "--device", "cpu", "--small", "--targets", "qwen3-30b-a3b", "--out", str(out),
                 "--budget-s", "60"]) == 1
    assert "calibrate (tiny qwen3_moe): failed; run (tiny qwen3_moe): skipped" in capsys.readouterr().out
    doc = json.loads((out / "summary.json").read_text())
    status = {p["phase"]: (p["status"], p.get("why")) for p in doc["phases"]}
    assert status["recompute"] == ("passed", None) and status["record"] == ("passed", None)
    assert status["calibrate"] == ("failed", "RuntimeError: the device fell over")
    assert status["run"] == ("skipped", "needs calibrate, which did not pass")
    assert not doc["passed"] and (out / "summary.md").read_text().startswith("# Device check: NOT PASSED")
