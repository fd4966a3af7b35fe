"""A stored profile brought to a run's pace (validate/drift.py): scaled exactly by the anchors' factors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ecosim.catalog.devices import get_device
from ecosim.trace.io import read_trace
from validate.calibrate import Samples
from validate.drift import retimed

RUN = Path(__file__).parent / "data" / "ecosim-tiny-x256-cpu-8p"


def _anchors(doc, shape, cases, factor):
    """Anchor runs of `cases` measured `factor` x what the stored profile's own fit prices them at."""
    from validate.calibrate import fit, predict
    from validate.drift import stored_samples

    local = fit(stored_samples(doc, None), shape, doc["calibration"]["fit"]["overlap"])
    anchors = Samples()
    for i, c in enumerate(cases):
        t = float(predict(local, shape, np.array([c["tokens"]]), np.array([c["union_per_layer"]]), np.array([c["context"]]))[0])
        for _ in range(2):
            anchors.case.append(i); anchors.kinds.append(c["kind"]); anchors.tokens.append(c["tokens"])
            anchors.unions.append(c["union_per_layer"]); anchors.contexts.append(c["context"]); anchors.seconds.append(factor * t)
    return anchors


def test_anchors_slower_by_a_tenth_scale_the_profile_by_a_tenth(tmp_path):
    doc = json.loads((RUN / "profile.json").read_text())
    shape = read_trace(RUN / "trace").model
    anchors = _anchors(doc, shape, doc["calibration"]["cases"][:3], 1.1)  # 10% slower than the profile prices them
    anchors.draft_seconds = [0.8 * doc["draft_time_s"]] * 3  # drafts 20% faster
    new = retimed(doc, shape, anchors, None, "given.json")  # every stored case kept
    # least squares weighted by 1/t is scale-equivariant: the same fit, every time 1.1 x longer
    assert new["hbm_bw"] == pytest.approx(doc["hbm_bw"] / 1.1, rel=1e-9)
    assert new["peak_bf16"] == pytest.approx(doc["peak_bf16"] / 1.1, rel=1e-9)
    assert new["step_overhead_s"] == pytest.approx(doc["step_overhead_s"] * 1.1, rel=1e-9)
    assert new["draft_time_s"] == pytest.approx(doc["draft_time_s"] * 0.8, rel=1e-12)
    assert new["calibration"]["fit"]["rel_rmse"] == pytest.approx(doc["calibration"]["fit"]["rel_rmse"], rel=1e-9)
    d = new["calibration"]["drift"]
    assert d["given"] == "given.json" and (d["anchor_cases"], d["anchor_runs"], d["anchor_drafts"]) == (3, 6, 3)
    assert (d["verify_factor"], d["draft_factor"]) == (pytest.approx(1.1), pytest.approx(0.8))
    assert [c["median_s"] for c in new["calibration"]["cases"]] == pytest.approx(
        [1.1 * c["median_s"] for c in doc["calibration"]["cases"]])
    (tmp_path / "p.json").write_text(json.dumps(new))  # what ecosim reads from it: the same device, 1.1 x slower
    assert get_device(str(tmp_path / "p.json")).hbm_bw == pytest.approx(doc["hbm_bw"] / 1.1, rel=1e-9)


def test_the_refit_keeps_the_sizes_the_run_verifies():
    doc = json.loads((RUN / "profile.json").read_text())
    shape = read_trace(RUN / "trace").model
    anchors = _anchors(doc, shape, doc["calibration"]["cases"][:3], 1.0)
    anchors.draft_seconds = [doc["draft_time_s"]]
    new = retimed(doc, shape, anchors, 5, "given.json")
    # 1 token: 4 roots, 2 to 4 tokens: 4 growth rules each; at 2 contexts: (4 + 3 x 4) x 2 = 32 of the 80 cases
    d = new["calibration"]["drift"]
    assert (d["most_tokens"], d["cases_kept"], d["cases_stored"]) == (5, 32, 80)
    assert {c["tokens"] for c in new["calibration"]["cases"]} == {1, 2, 3, 4}
    assert new["calibration"]["fit"]["rel_rmse"] < doc["calibration"]["fit"]["rel_rmse"]  # a local line fits closer
    # fewer than three stored cases that small: every case is kept
    assert retimed(doc, shape, anchors, 0, "given.json")["calibration"]["drift"]["cases_kept"] == 80


def test_run_with_a_stored_profile_prices_with_it_retimed(tmp_path, tiny_pair_dir, prompts_path, capsys):
    """`validate run --hardware P` writes RUN/profile.json, P re-timed; --no-retime prices with P itself."""
    from ecosim.gate.profiles import PB_S
    from validate.cli import main
    from vhelpers import TREE

    tree = ["--depth", str(TREE["depth"]), "--topk", str(TREE["topk"]), "--max-nodes", str(TREE["max_nodes"])]
    prof = tmp_path / "profile.json"
    assert main(["calibrate", "--model", str(tiny_pair_dir), "--out", str(prof), "--tokens", "1,3,5", "--levels", "2",
                 "--prompts", str(prompts_path), "--contexts", "24", "--repeats", "2", "--quiet", *tree]) == 0
    common = ["run", "--model", str(tiny_pair_dir), "--prompts", str(prompts_path), "--max-prompts", "1", "--policy",
              "confidence", "--budget", "4", "--max-new-tokens", "6", "--repeats", "1", "--hardware", str(prof),
              "--no-fail", *tree]
    assert main([*common, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr()
    assert "re-timed on" in out.err and "re-timed at this run's pace" in " ".join(out.out.split())  # (wrapped at 160)
    doc = json.loads((tmp_path / "a" / "profile.json").read_text())
    d = doc["calibration"]["drift"]
    assert d["given"] == str(prof.resolve()) and d["verify_factor"] > 0 and d["anchor_runs"] == 2 * d["anchor_cases"]
    given = json.loads(prof.read_text())
    # the stored bandwidth scaled by the run's pace, within what a profile may hold; one stored at that
    # ceiling (a bandwidth this tiny model cannot measure) was at least the ceiling, so it rescales to
    # at least the ceiling over the pace, held at the ceiling again when the run went faster (pace < 1)
    scaled = given["hbm_bw"] / d["verify_factor"]
    if given["hbm_bw"] < PB_S:
        assert doc["hbm_bw"] == pytest.approx(min(scaled, PB_S), rel=1e-6)
    else:
        assert min(scaled, PB_S) * (1 - 1e-6) <= doc["hbm_bw"] <= PB_S
    assert json.loads((tmp_path / "a" / "measured.json").read_text())["profile"] == str((tmp_path / "a" / "profile.json").resolve())
    assert main([*common, "--out", str(tmp_path / "b"), "--no-retime"]) == 0
    capsys.readouterr()
    assert not (tmp_path / "b" / "profile.json").exists()
    assert json.loads((tmp_path / "b" / "measured.json").read_text())["profile"] == str(prof.resolve())
