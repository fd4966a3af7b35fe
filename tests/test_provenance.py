"""A trace's provenance (real, hybrid, synthetic), read once by the trace reader, labels every
output: replay's table, its --json rows and totals, a sweep's results.parquet, winner.json and
Pareto front, and the Python API. A total over traces of different provenances is `mixed`."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import ecosim
from conftest import tiny_trace
from ecosim.cli import main
from ecosim.metrics import Row, total
from ecosim.sweep.results import row_of
from ecosim.trace.io import read_trace, write_trace
from ecosim.trace.schema import PROVENANCE_NOTES

HYBRID_NOTE = PROVENANCE_NOTES["hybrid"]
SYNTHETIC_NOTE = PROVENANCE_NOTES["synthetic"]


def _labelled(tmp_path: Path, name: str, kind: str, seed: int) -> Path:
    """A small trace whose manifest says `kind` (the manifest alone decides the label)."""
    m, pos, nodes = tiny_trace(seed)
    m = {**m, "version": 2, "synthetic": kind != "real", "provenance": {"kind": kind, "source": "test: labelled by hand"}}
    return write_trace(tmp_path / name, m, pos, nodes)


@pytest.fixture
def hyb(tmp_path: Path) -> Path:
    return _labelled(tmp_path, "hyb", "hybrid", 31)


@pytest.fixture
def real(tmp_path: Path) -> Path:
    return _labelled(tmp_path, "rec", "real", 32)


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich may wrap a long warning line


def test_reader_gives_hybrid(hyb: Path) -> None:
    t = read_trace(hyb)
    assert t.provenance == "hybrid" and t.synthetic


def test_replay_json_rows_and_totals(hyb: Path, real: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["replay", str(hyb), str(real), "--policy", "confidence", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_trace = {r["trace"]: r for r in doc["rows"]}
    assert by_trace["hyb"]["provenance"] == "hybrid" and by_trace["hyb"]["synthetic"] is True
    assert by_trace["rec"]["provenance"] == "real" and by_trace["rec"]["synthetic"] is False
    assert doc["totals"] and all(t["provenance"] == "mixed" and t["synthetic"] is True for t in doc["totals"])


def test_replay_table_labels_and_warns(hyb: Path, real: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["replay", str(hyb), str(real), "--policy", "confidence"]) == 0  # one row over both: mixed
    assert any("2 traces" in ln and "mixed" in ln for ln in capsys.readouterr().out.splitlines())
    assert main(["replay", str(hyb), str(real), "--policy", "confidence", "--per-trace"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any("hyb" in ln and "hybrid" in ln for ln in lines)
    assert any("rec" in ln and " real " in ln for ln in lines)
    assert any("total" in ln and "mixed" in ln for ln in lines)
    assert HYBRID_NOTE in _flat(out) and SYNTHETIC_NOTE not in _flat(out)
    assert main(["replay", str(real), "--policy", "confidence"]) == 0
    out = _flat(capsys.readouterr().out)
    assert HYBRID_NOTE not in out and SYNTHETIC_NOTE not in out


def test_sweep_results_winner_and_pareto(hyb: Path, real: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", str(hyb), str(real), "--out", str(out), "--jobs", "1", "--policy", "ar,confidence",
                 "--budget", "2,4"]) == 0
    assert HYBRID_NOTE in _flat(capsys.readouterr().out)
    df = pl.read_parquet(out / "results.parquet")
    kinds = dict(df.select("trace", "provenance", "synthetic").unique().sort("trace").select("trace", "provenance").iter_rows())
    assert kinds == {"hyb": "hybrid", "rec": "real"}
    assert (df["synthetic"] == (df["provenance"] != "real")).all()
    win = json.loads((out / "winner.json").read_text())
    assert {t["name"]: t["provenance"] for t in win["traces"]} == {"hyb": "hybrid", "rec": "real"}
    assert {p["trace"]: p["provenance"] for p in win["winners"][0]["per_trace"]} == {"hyb": "hybrid", "rec": "real"}
    assert main(["winner", str(out)]) == 0
    assert HYBRID_NOTE in _flat(capsys.readouterr().out)
    assert main(["pareto", str(out), "--json"]) == 0
    assert {t["name"]: t["provenance"] for t in json.loads(capsys.readouterr().out)["traces"]} == {"hyb": "hybrid", "rec": "real"}
    assert main(["pareto", str(out)]) == 0
    assert HYBRID_NOTE in _flat(capsys.readouterr().out)


def test_python_api(hyb: Path, real: Path) -> None:
    df = ecosim.replay([hyb, real], policy="confidence", budget=4)
    kinds = dict(df.select("trace", "provenance").unique().iter_rows())
    assert kinds == {"hyb": "hybrid", "rec": "real", "total": "mixed"}


def _row(kind: str) -> Row:
    return Row("t", kind, 1, 10, 5, 9, 20, 20.0, 0.0, 1.0)


def test_totals_keep_one_provenance_or_say_mixed() -> None:
    assert total([_row("hybrid"), _row("hybrid")]).provenance == "hybrid"
    assert total([_row("hybrid"), _row("synthetic")]).provenance == "mixed"
    assert total([_row("real"), _row("real")]).synthetic is False
    assert total([_row("real"), _row("hybrid")]).synthetic is True


def test_records_written_before_provenance_read_from_synthetic() -> None:
    rec = {k: v for k, v in _row("real").to_dict().items() if k != "provenance"}
    assert row_of({**rec, "synthetic": True}).provenance == "synthetic"
    assert row_of({**rec, "synthetic": False}).provenance == "real"
    assert row_of({**rec, "synthetic": True, "provenance": "hybrid"}).provenance == "hybrid"
