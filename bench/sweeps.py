"""Sweeps: configurations per minute with the local executor and with Ray, and the 1,000-configuration sweep.

Each sweep runs as a user runs it (`ecosim sweep ... --json` in a fresh process), so its wall time
includes starting Python, the workers (and Ray), reading the traces and writing the results.

- `sweep`: a grid over the committed real traces (`traces/`), `--jobs 2`, once with `--executor
  local` and once with `--executor ray` (a local Ray with 2 CPUs); configurations per minute of
  each, their ratio, and whether the two results files hold identical rows.
- `sweep1000`: 50 lambdas x 4 budgets x 5 placements of ecospec (plus confidence per budget, ar and
  the oracle per placement: 1,030 configurations) over the synthetic DeepSeek-V3.1-shaped trace of
  10,000 positions with 60-candidate trees, `--jobs 2`. Target: under 600 s on this
  2-core machine.
"""

from __future__ import annotations

import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, Report

REAL = ["--lambda", "0:0.5:0.1", "--budget", "8,16,32", "--predictor", "oracle", "--hardware", "h200",
        "--placement", "hbm,ep:4,offload:8"]
REAL_QUICK = ["--lambda", "0,0.2", "--budget", "8", "--predictor", "oracle", "--hardware", "h200", "--placement", "hbm,offload:8"]
GRID1000 = ["--lambda", "0:1.96:0.04", "--budget", "8,16,32,60", "--predictor", "oracle", "--hardware", "h200",
            "--placement", "tp:8,ep:8,ep:16,tp:4+ep:2,offload:32"]  # placements DeepSeek-V3.1 fits on H200s
GRID1000_QUICK = ["--lambda", "0:0.3:0.1", "--budget", "8,16", "--predictor", "oracle", "--hardware", "h200",
                  "--placement", "ep:8,offload:32"]


def sweep(traces: list[str], grid: list[str], out: Path, executor: str, jobs: int) -> tuple[float, float, dict[str, Any]]:
    """(wall seconds, CPU seconds of the children, the sweep's --json summary) of one fresh sweep."""
    cmd = [sys.executable, "-m", "ecosim.cli", "sweep", *traces, "--out", str(out), "--executor", executor,
           "--jobs", str(jobs), "--json", *grid]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr.strip()[-800:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, json.loads(res.stdout)


def _same_rows(a: Path, b: Path) -> bool:
    import polars as pl

    x, y = (pl.read_parquet(p / "results.parquet").sort("config_id") for p in (a, b))
    return x.columns == y.columns and x.equals(y)


def run_executors(report: Report, quick: bool, jobs: int) -> None:
    if importlib.util.find_spec("ray") is None:
        raise ImportError("ray is not installed", name="ray")
    traces = [str(ROOT / "traces")]
    grid = REAL_QUICK if quick else REAL
    b = "sweep"
    with tempfile.TemporaryDirectory(prefix="ecosim-bench-") as tmp:
        walls = {}
        for executor in ("local", "ray"):
            wall, _, summary = sweep(traces, grid, Path(tmp) / executor, executor, jobs)
            walls[executor] = wall
            n = summary["rows"]  # (configuration, trace) rows, as before the summary split the two counts
            report.add(b, f"{executor}.configs_per_min", n / wall * 60, "configs/min",
                       note=f"{n} (configuration, trace) rows: {summary['configurations']} configurations x "
                            f"{summary['traces']} real traces, --jobs {jobs}, {wall:.1f} s wall")
        report.add(b, "ray_over_local", walls["local"] / walls["ray"], "x",
                   note="configurations per minute of Ray over local (Ray's start-up included)")
        report.add(b, "ray_equals_local", float(_same_rows(Path(tmp) / "local", Path(tmp) / "ray")), "", target="== 1",
                   note="1 when both results files hold identical rows")


def run_1000(report: Report, trace: Path, quick: bool, jobs: int) -> None:
    grid = GRID1000_QUICK if quick else GRID1000
    b = "sweep1000"
    with tempfile.TemporaryDirectory(prefix="ecosim-bench-") as tmp:
        wall, cpu, summary = sweep([str(trace)], grid, Path(tmp) / "s", "local", jobs)
    n = summary["configurations"]
    report.add(b, "configurations", n, note=f"{summary['tasks_run']} work units (a task per selection, ecospec budgets batched per lambda) over {trace.name}")
    report.add(b, "wall_s", wall, "s", target=None if quick else "< 600", note=f"--jobs {jobs}")
    report.add(b, "configs_per_min", n / wall * 60, "configs/min")
    report.add(b, "cpu_s", cpu, "s", note="CPU seconds of the sweep's processes, all cores")
