"""No command destroys what it did not create (ecosim/outputs.py): every writer, end to end.

Each refusal is one line on stderr, exit status 2, and leaves the path byte for byte as it was.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, tiny_trace
from ecosim.cli import main as ecosim_main
from ecosim.errors import EcoSimError
from ecosim.outputs import PREDICTOR, SWEEP, TRACE, check_output
from ecosim.trace.io import write_trace

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="tracer and validate need torch and transformers")


def _snapshot(p: Path) -> dict[str, bytes]:
    if p.is_file():
        return {"": p.read_bytes()}
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def _refused(code: int, capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    for w in words:
        assert w in err[0], err[0]
    return err[0]


SYNTH = ["--model", "olmoe-1b-7b", "--requests", "1", "--positions", "5"]


def test_synth_never_replaces_a_real_trace_even_with_force(tmp_path, capsys):
    real = tmp_path / "qa"
    shutil.copytree(ROOT / "traces" / "qa", real)
    before = _snapshot(real)
    _refused(ecosim_main(["synth", str(real), *SYNTH]), capsys, "already there", "--force")
    assert _snapshot(real) == before
    _refused(ecosim_main(["synth", str(real), *SYNTH, "--force"]), capsys, "real (recorded) trace")
    assert _snapshot(real) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qa"]  # no temporary left beside it


def test_synth_replaces_its_own_synthetic_trace_only_with_force(tmp_path, capsys):
    out = tmp_path / "s"
    assert ecosim_main(["synth", str(out), *SYNTH]) == 0
    before = _snapshot(out)
    _refused(ecosim_main(["synth", str(out), *SYNTH, "--seed", "1"]), capsys, "--force")
    assert _snapshot(out) == before
    assert ecosim_main(["synth", str(out), *SYNTH, "--seed", "1", "--force"]) == 0
    assert _snapshot(out) != before


def test_synth_refuses_a_folder_that_is_not_a_trace_even_with_force(tmp_path, capsys):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    _refused(ecosim_main(["synth", str(d), *SYNTH, "--force"]), capsys, "not a trace")
    assert (d / "notes.txt").read_text() == "keep me"


def test_predictor_train_keeps_other_files_and_replaces_a_predictor_only_with_force(tmp_path, capsys):
    trace = write_trace(tmp_path / "t", *tiny_trace(3, requests=3, positions=10))
    other = tmp_path / "data.npz"
    other.write_bytes(b"my data")
    args = ["predictor", "train", str(trace), "--kind", "freq", "--holdout", "0"]
    _refused(ecosim_main([*args, "--out", str(other), "--force"]), capsys, "not a predictor file")
    assert other.read_bytes() == b"my data"
    pred = tmp_path / "p.npz"
    assert ecosim_main([*args, "--out", str(pred)]) == 0
    capsys.readouterr()
    before = pred.read_bytes()
    _refused(ecosim_main([*args, "--out", str(pred), "--seed", "1"]), capsys, "already there", "--force")
    assert pred.read_bytes() == before
    assert ecosim_main([*args, "--out", str(pred), "--force"]) == 0


def test_sweep_writes_only_into_a_sweep_directory_and_still_resumes(tmp_path, capsys):
    trace = write_trace(tmp_path / "t", *tiny_trace(4, positions=8))
    d = tmp_path / "mine"
    d.mkdir()
    (d / "results.parquet").write_bytes(b"not ours")
    args = ["sweep", str(trace), "--jobs", "1", "--policy", "ar", "--budget", "2"]
    _refused(ecosim_main([*args, "--out", str(d)]), capsys, "not a sweep directory")
    assert _snapshot(d) == {"results.parquet": b"not ours"}
    sw = tmp_path / "sw"
    assert ecosim_main([*args, "--out", str(sw)]) == 0
    capsys.readouterr()
    assert ecosim_main([*args, "--out", str(sw)]) == 0  # rerun = resume, no flag needed
    assert "(0 computed, 2 already done)" in capsys.readouterr().out  # ar and the oracle bound


def test_report_writes_only_into_a_report_build(tmp_path, capsys):
    d = tmp_path / "site"
    d.mkdir()
    (d / "index.html").write_text("my page")
    _refused(ecosim_main(["report", "--traces", str(ROOT / "traces"), "--out", str(d), "--only", "pareto"]), capsys,
             "not a report build")
    assert (d / "index.html").read_text() == "my page" and len(list(d.iterdir())) == 1


@needs_torch
def test_tracer_record_needs_resume_or_force_over_a_trace_and_never_writes_into_other_folders(tmp_path, capsys):
    from tracer.cli import main as tracer_main

    real = tmp_path / "qa"
    shutil.copytree(ROOT / "traces" / "qa", real)
    before = _snapshot(real)
    prompts = str(ROOT / "prompts" / "qa.jsonl")
    args = ["record", "--model", str(ROOT / "models" / "ecosim-tiny"), "--prompts", prompts, "--max-new-tokens", "2"]
    with pytest.raises(SystemExit) as e:
        tracer_main([*args, "--out", str(real)])
    _refused(e.value.code, capsys, "--resume", "--force")
    assert _snapshot(real) == before
    d = tmp_path / "mine"
    d.mkdir()
    (d / "x").write_text("keep")
    with pytest.raises(SystemExit) as e:
        tracer_main([*args, "--out", str(d), "--force"])
    _refused(e.value.code, capsys, "not a trace")
    assert (d / "x").read_text() == "keep"


@needs_torch
def test_validate_writers_refuse_what_they_did_not_create(tmp_path, capsys):
    from validate.cli import main as validate_main

    model = str(ROOT / "models" / "ecosim-tiny")
    f = tmp_path / "profile.json"
    f.write_text('{"mine": 1}')
    _refused(validate_main(["calibrate", "--model", model, "--out", str(f), "--force"]), capsys, "not a hardware profile")
    assert f.read_text() == '{"mine": 1}'
    d = tmp_path / "mine"
    d.mkdir()
    (d / "x").write_text("keep")
    _refused(validate_main(["run", "--model", model, "--policy", "ar", "--prompts", str(ROOT / "prompts" / "qa.jsonl"),
                            "--out", str(d), "--force"]), capsys, "not a validate run")
    _refused(validate_main(["report", str(ROOT / "tests" / "validate" / "data" / "ecosim-tiny-x256-cpu"), "--out", str(d)]),
             capsys, "not a comparison folder")
    assert _snapshot(d) == {"x": b"keep"}


def test_check_output_rules(tmp_path):
    """The rule itself: absent or empty is free; own kind needs --force (or is resumable); else never."""
    check_output(tmp_path / "absent", TRACE)
    (tmp_path / "empty").mkdir()
    check_output(tmp_path / "empty", TRACE)
    t = write_trace(tmp_path / "t", *tiny_trace(1, positions=4))  # synthetic
    with pytest.raises(EcoSimError, match="--force"):
        check_output(t, TRACE)
    check_output(t, TRACE, force=True, keep_protected=True)
    check_output(t, TRACE, resume=True)
    with pytest.raises(EcoSimError, match="not a sweep directory"):
        check_output(t, SWEEP, force=True)
    with pytest.raises(EcoSimError, match="is a directory"):
        check_output(t, PREDICTOR, force=True)
    (tmp_path / "f").write_text("x")
    with pytest.raises(EcoSimError, match="not a directory"):
        check_output(tmp_path / "f", TRACE, force=True)
