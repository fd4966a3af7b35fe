"""What the sweep tests share: a small grid (its options), the two tiny traces it runs on, one full sweep of them
over the grid, the in-process `ecosim` runners and the results file as a frame.

The fixtures `traces` and `swept` are module-scoped: a test module imports them, and makes the traces and runs
the full sweep once for itself (its tests may write into its sweep: rerun it, leave a winner.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from conftest import tiny_trace
from ecosim.cli import main
from ecosim.trace.io import write_trace


# A small grid: ar, confidence (2 budgets), ecospec (2 budgets x 3 lambdas), oracle, over 2 x 3 pricings.
GRID = ["--policy", "ar,confidence,ecospec", "--budget", "2,4", "--lambda", "0:1:0.5", "--predictor", "oracle",
        "--bw", "2TB/s,4.8TB/s", "--placement", "hbm,ep:2,offload:4"]


def make_traces(d: Path) -> list[Path]:
    """The two traces the sweep tests run on, written under `d`."""
    return [write_trace(d / "a", *tiny_trace(21)), write_trace(d / "b", *tiny_trace(22, requests=3))]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def sweep(capsys, traces, out: Path, *extra: str) -> dict:
    code, stdout, err = cli(capsys, "sweep", *map(str, traces), "--out", str(out), "--jobs", "1", "--json", *GRID, *extra)
    assert code == 0, err
    return json.loads(stdout)


def full_sweep(traces: list[Path], root: Path) -> Path:
    """One uninterrupted sweep of `traces` over GRID, in root/run."""
    out = root / "run"
    code = main(["sweep", *map(str, traces), "--out", str(out), "--jobs", "1", *GRID])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[Path]:
    return make_traces(tmp_path_factory.mktemp("sweep_traces"))


@pytest.fixture(scope="module")
def swept(traces, tmp_path_factory) -> Path:
    return full_sweep(traces, tmp_path_factory.mktemp("sweep"))


def _frame(d: Path) -> pl.DataFrame:
    return pl.read_parquet(d / "results.parquet")
