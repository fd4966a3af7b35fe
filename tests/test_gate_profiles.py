"""The input gate on hardware and serving profiles and arrival files, and at the cost model's boundary: a bad
profile field is refused in one line naming it (a misspelled one with the right name), every shipped and
calibrated profile passes, arrivals must be finite, no negative or non-finite time leaves the cost model, and an
internal error is one line with exit 70.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, TINY
from ecosim.errors import InternalError
from gate_cases import HW, SERVING, base_trace, refused, run


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return base_trace(tmp_path_factory.mktemp("gate"))


HW_EDITS = [("hbm_bw", "x"), ("hbm_bw", None), ("hbm_bw", 0), ("hbm_bw", -4.8e12), ("hbm_bw", math.nan),
            ("serving", [1]), ("peak_bf16", 0), ("step_overhead_s", -1)]


@pytest.mark.parametrize("key,value", HW_EDITS, ids=[f"{k}={v}" for k, v in HW_EDITS])
def test_a_bad_hardware_profile_is_refused_naming_the_field(capsys, tmp_path, base, key, value):
    d = json.loads(HW.read_text()) | {key: value}
    (tmp_path / "hw.json").write_text(json.dumps(d, allow_nan=True))
    for args in (["replay", base, "--policy", "ar"], ["sweep", base, "--out", tmp_path / "s", "--policy", "ar"]):
        refused(capsys, args + ["--hardware", tmp_path / "hw.json"], "hw.json", f"field '{key}'", "allowed")
    assert not (tmp_path / "s").exists()


def test_a_misspelled_serving_field_is_named_with_the_right_one(capsys, tmp_path, base):
    d = json.loads(SERVING.read_text())
    d["kernal_latency_s"] = d.pop("kernel_latency_s")
    (tmp_path / "sv.json").write_text(json.dumps(d))
    refused(capsys, ["replay", base, "--policy", "ar", "--profile", tmp_path / "sv.json"],
            "sv.json", "kernal_latency_s", "did you mean 'kernel_latency_s'")


def test_shipped_and_calibrated_profiles_pass_the_gate():
    from ecosim.catalog.devices import DEVICES, load_profile
    from ecosim.catalog.serving import load_serving, shipped

    assert len(DEVICES) >= 6 and all(load_serving(n) for n in shipped())
    for p in (ROOT / "tests" / "validate" / "data").rglob("profile.json"):
        assert load_profile(p).hbm_bw > 0


def test_arrivals_must_be_finite(capsys, tmp_path, base):
    (tmp_path / "a.json").write_text("[0, 1, Infinity]")
    refused(capsys, ["replay", base, "--engine", "des", "--policy", "ar", "--arrivals", tmp_path / "a.json"],
            "a.json", "Infinity", "allowed")
    (tmp_path / "a.json").write_text("[0]")
    refused(capsys, ["replay", base, "--engine", "des", "--policy", "ar", "--arrivals", tmp_path / "a.json"],
            "at least 2")


# ==================================================================== the cost model's boundary


def test_no_negative_or_non_finite_time_leaves_the_cost_model():
    from ecosim.catalog.devices import get_device
    from ecosim.cost import CostModel

    for bad in (-1.0, math.nan, 0.0):
        c = CostModel(TINY, get_device("h200").replace(hbm_bw=bad) if bad else get_device("h200").replace(peak_bf16=bad))
        with pytest.raises(InternalError) as e:
            c.step_times(np.ones((2, 3)), np.ones(2), np.ones(2), False)
        msg = str(e.value)
        assert "\n" not in msg and "tiny-test" in msg and "hbm_bw" in msg and "must be finite and >= 0" in msg
    ok = CostModel(TINY, get_device("h200")).step_times(np.ones((2, 3)), np.ones(2), np.ones(2), False)
    assert np.all(np.isfinite(ok)) and np.all(ok > 0)


def test_an_internal_error_is_one_line_and_exit_70(capsys, monkeypatch, base):
    from ecosim.cost import CostModel

    monkeypatch.setattr(CostModel, "bw", property(lambda self: -1.0))
    code, out, err = run(capsys, "replay", base, "--policy", "ar")
    assert code == 70 and len(err.strip().splitlines()) == 1 and "internal error" in err and "Traceback" not in err
