"""Resuming a sweep: killed right after a part (the runner's test hook), it resumes without loss or duplicates to
exactly the uninterrupted results; run again when finished, it skips everything and rewrites identical results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from ecosim.sweep.runner import KILL_AFTER_PART
from sweep_runs import GRID, _frame, sweep, swept, traces  # noqa: F401 (the fixtures)


def _parts(d: Path) -> list[Path]:
    return [p for p in (d / "parts").glob("*.parquet") if not p.name.startswith(".")]  # not temporaries


@pytest.mark.slow
def test_killed_sweep_resumes_without_loss_or_duplicates(swept, traces, tmp_path):
    out = tmp_path / "killed"
    args = [sys.executable, "-m", "ecosim.cli", "sweep", *map(str, traces), "--out", str(out), "--jobs", "1", *GRID]
    # killed right after its third part (the runner's test hook): a point that does not depend on speed
    env = dict(os.environ, **{KILL_AFTER_PART: "3"})
    proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert len(_parts(out)) == 3 and not (out / "results.parquet").exists()
    before = len(_parts(out))
    r = subprocess.run([*args, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["skipped"] > 0 and summary["computed"] > 0
    # computed and skipped count (configuration, trace) rows; configurations count settings
    assert summary["skipped"] + summary["computed"] == summary["configurations"] * summary["traces"] == summary["rows"]
    assert len(_parts(out)) == before + summary["tasks_run"]
    assert not list((out / "parts").glob(".tmp-*"))  # a temporary the kill left is cleaned up
    got = _frame(out)
    assert got["config_id"].n_unique() == got.height
    assert got.equals(_frame(swept))  # identical to the uninterrupted sweep, row for row


def test_rerun_skips_everything_and_rewrites_identical_results(swept, traces, capsys):
    before = (swept / "results.parquet").read_bytes()
    s = sweep(capsys, traces, swept)
    assert s["computed"] == 0 and s["skipped"] == s["configurations"] * s["traces"] == 120 and s["tasks_run"] == 0
    assert (swept / "results.parquet").read_bytes() == before
