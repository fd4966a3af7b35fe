"""A committed real run (tests/validate/data/*/README.md): the simulator must still predict it the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from validate.cli import main
from validate.compare import compare_run

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("run", sorted(p.name for p in DATA.iterdir() if (p / "measured.json").is_file()))
def test_committed_run_is_predicted_as_recorded(tmp_path, run):
    d = tmp_path / run
    shutil.copytree(DATA / run, d)
    doc = compare_run(d)
    want = json.loads((DATA / run / "expected.json").read_text())
    assert doc["lossless"] and doc["trace_matches_greedy"] and not doc["trace_synthetic"]
    assert doc["ranking_preserved"] == want["ranking_preserved"]
    for label, p in want["policies"].items():
        got = next(x for x in doc["policies"] if x["label"] == label)
        assert got["measured_time_per_token_s"] == pytest.approx(p["measured_time_per_token_s"], rel=1e-12)
        assert got["simulated_time_per_token_s"] == pytest.approx(p["simulated_time_per_token_s"], rel=1e-9), (
            f"the simulator's prediction for {label} changed; update expected.json if that is intended")
        assert got["steps"] == got["simulated_steps"]  # the real run walked the replay's steps
    assert doc["mae_pct"] == pytest.approx(want["mae_pct"], rel=1e-9)
    assert doc["worst_pct"] == pytest.approx(want["worst_pct"], rel=1e-9)
    assert (d / "comparison.parquet").is_file()


FIXTURE = DATA / "ecosim-tiny-x256-cpu"


def test_report_of_a_committed_run_writes_elsewhere(tmp_path, capsys):
    """`validate report RUN --out DIR` (the README's command) leaves the committed run untouched."""
    before = sorted(p.name for p in FIXTURE.iterdir())
    assert main(["report", str(FIXTURE), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "lossless: yes" in out and "ranking preserved: yes" in out
    assert (tmp_path / "cmp" / "comparison.json").is_file() and (tmp_path / "cmp" / "comparison.parquet").is_file()
    assert sorted(p.name for p in FIXTURE.iterdir()) == before


def test_report_of_a_run_that_was_not_lossless_exits_1(tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(FIXTURE, d)
    m = json.loads((d / "measured.json").read_text())
    m["lossless"] = False
    m["lossless_failures"] = [{"policy": "ar", "request": 2, "repeat": 1, "position": 5, "expected": 7, "got": 9}]
    (d / "measured.json").write_text(json.dumps(m))
    assert main(["report", str(d)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("validate: error: not lossless: ar request 2 (repeat 1) diverges from greedy decoding at position 5 "
                   "(expected token 7, got 9)")


def test_a_missed_fidelity_target_exits_3_unless_no_fail(tmp_path, capsys, monkeypatch):
    """The fixture meets the targets (2.06% mean error); with a 1% target it misses one: exit 3, one line."""
    import validate.compare

    monkeypatch.setitem(validate.compare.TARGETS, "mae_pct", 1.0)
    assert main(["report", str(FIXTURE), "--out", str(tmp_path / "a")]) == 3
    out = capsys.readouterr()
    assert "MISSED" in out.out
    err = out.err.strip().splitlines()
    assert err == ["validate: error: fidelity target missed: mean absolute error 2.06% > 1% (--no-fail exits 0)"]
    assert main(["report", str(FIXTURE), "--out", str(tmp_path / "b"), "--no-fail"]) == 0
    assert capsys.readouterr().err == ""


def test_exit_codes_are_in_the_help(capsys):
    for cmd in ("run", "report"):
        assert main([cmd, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "3 a fidelity target missed" in text and "1 not lossless" in text and "--no-fail" in text


def test_fresh_eight_prompt_run_with_a_token_winner_meets_the_targets(tmp_path):
    """A fresh run (8 prompts, winner of a `token` sweep, CPU clock) within
    the targets: mean absolute error <= 3%, worst <= 8%, ranking preserved, winner faster than
    confidence (data/ecosim-tiny-x256-cpu-8p/README.md)."""
    d = tmp_path / "run"
    shutil.copytree(DATA / "ecosim-tiny-x256-cpu-8p", d)
    doc = compare_run(d)
    measured = json.loads((d / "measured.json").read_text())
    assert len(measured["requests"]) == 8 and measured["environment"]["clock"] == "cpu"
    assert doc["policies"][0]["predictor"] == "token" and doc["policies"][0]["policy"] == "ecospec"
    assert [p["policy"] for p in doc["policies"]] == ["ecospec", "ar", "confidence"]
    assert all(t["met"] for t in doc["targets"].values()), doc["targets"]
    assert doc["mae_pct"] <= 3.0 and doc["worst_pct"] <= 8.0 and doc["ranking_preserved"]


def test_table_columns_each_have_their_own_name(tmp_path):
    """Every column of `validate report`'s table says what it is: no two share a header (three were "sim")."""
    from validate.report import table

    cols = [c.header for c in table(compare_run(FIXTURE, out=tmp_path)).columns]
    assert len(cols) == len(set(cols)), cols
    for measured, simulated in (("exp/step", "sim exp/step"), ("ms/tok", "sim ms/tok"), ("vs ar", "sim vs ar")):
        assert cols[cols.index(measured) + 1] == simulated  # each simulated figure beside its measured one


def test_draft_step_is_one_figure_of_the_run(tmp_path, capsys):
    """The draft's cost per step the docs quote: the mean draft phase over the speculative steps, and the profile's."""
    import polars as pl

    run = DATA / "ecosim-tiny-x256-cpu-8p"
    doc = compare_run(run, out=tmp_path)
    steps = pl.read_parquet(run / "steps.parquet").filter(pl.col("policy") != "ar")
    profile = json.loads((run / "profile.json").read_text())
    assert doc["draft_step"]["measured_s"] == pytest.approx(steps["draft_s"].mean(), rel=1e-12)
    assert doc["draft_step"]["profile_s"] == profile["draft_time_s"]
    assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    assert "draft step: 14.5 ms measured (mean over the speculative policies' steps), 16.0 ms charged by the profile" \
        in capsys.readouterr().out
