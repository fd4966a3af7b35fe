"""Peak resident memory of a replay against the trace's size on disk, whole and in pieces.

The synthetic DeepSeek-V3.1-shaped trace of the replay benchmark (10 requests x 1,000 positions,
60-candidate trees; labelled synthetic). Each replay runs in a fresh process (`ecosim replay
--policy confidence --json`) and its peak RSS is read from the kernel (VmHWM of the child).

- `disk_mb`, `arrays_mb`: the trace on disk, and its node rows as arrays (rows x bytes per row).
- `whole_peak_rss_mb`: the replay with the trace in memory; `whole_rss_over_disk` its ratio.
- `budget_mb`: the `--max-memory` given to the piece-wise replay: what two requests need by
  stream.py's estimate (WORKING_SET x their rows' bytes), well under what the whole replay takes.
- `pieces_peak_rss_mb`, `pieces_over_whole`: the piece-wise replay's peak and its ratio to the whole.
- `pieces_equal_whole`: 1 when both replays report identical totals.
- `all_policy_peak_rss_mb`: every policy at its defaults (`ecosim replay TRACE --placement ep:8
  --json`), the whole trace in memory; `baseline_mb` the same interpreter's peak for `ecosim
  --help`; `all_policy_beyond_baseline_over_disk` (peak - baseline) / the trace's bytes on disk,
  target < 3. What takes it: the routing, one byte per id (about its size on disk), the oracle's
  chain unions, each policy's step unions, and what a replay holds whatever the trace's size
  (speed.py's `fixed_mb`). The token predictor's predictions are its distinct sets (a few MB).
- `tune_peak_rss_mb`, `tune_beyond_baseline_over_disk`: the same for `ecosim tune TRACE --placement
  ep:8 --json`, which replays every draft-step setting on the trace cut to it (target < 3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from bench.common import Report, disk_bytes, peak_rss
from ecosim.stream import WORKING_SET
from ecosim.trace.io import row_bytes


def run(report: Report, trace: Path) -> None:
    manifest = json.loads((trace / "manifest.json").read_text())
    requests = len(manifest["requests"])
    disk = disk_bytes(trace)
    per_row = row_bytes(manifest, gates=False)
    rows = pq.read_metadata(trace / "nodes.parquet").num_rows
    base = ["replay", str(trace), "--policy", "confidence", "--placement", "ep:8", "--json"]  # a placement DeepSeek-V3.1 fits
    whole, a = peak_rss(base)
    budget = 2 * rows / requests * per_row * WORKING_SET
    pieces, b = peak_rss(base + ["--max-memory", f"{budget / 1e6:.0f}MB"])
    m = "memory"
    report.add(m, "disk_mb", disk / 1e6, "MB", note=f"{trace.name}: {rows:,} node rows, {requests} requests; synthetic")
    report.add(m, "arrays_mb", rows * per_row / 1e6, "MB")
    report.add(m, "whole_peak_rss_mb", whole / 1e6, "MB")
    report.add(m, "whole_rss_over_disk", whole / disk, "x")
    report.add(m, "budget_mb", budget / 1e6, "MB", note="--max-memory: two requests' working set")
    report.add(m, "pieces_peak_rss_mb", pieces / 1e6, "MB")
    report.add(m, "pieces_over_whole", pieces / whole, "x", target="< 1", note="the piece-wise replay's peak over the whole replay's")
    report.add(m, "budget_over_whole", budget / whole, "x", target="< 1",
               note="the budget is smaller than what the whole replay took: the trace does not fit it")
    report.add(m, "pieces_equal_whole", float(a["totals"] == b["totals"]), "", target="== 1")
    base_rss, _ = peak_rss(["--help"], parse=False)
    every, _ = peak_rss(["replay", str(trace), "--placement", "ep:8", "--json"])
    report.add(m, "baseline_mb", base_rss / 1e6, "MB", note="the interpreter with ecosim's CLI loaded (ecosim --help)")
    report.add(m, "all_policy_peak_rss_mb", every / 1e6, "MB", note="every policy at its defaults, ep:8, the whole trace in memory")
    report.add(m, "all_policy_beyond_baseline_over_disk", (every - base_rss) / disk, "x", target="< 3")
    tuned, _ = peak_rss(["tune", str(trace), "--placement", "ep:8", "--json"])
    report.add(m, "tune_peak_rss_mb", tuned / 1e6, "MB", note="ecosim tune at its defaults, ep:8: every draft-step setting, "
               "each on the trace cut to it (one cut at a time beside the whole trace)")
    report.add(m, "tune_beyond_baseline_over_disk", (tuned - base_rss) / disk, "x", target="< 3")
