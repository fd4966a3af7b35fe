"""Peak resident memory of a replay against the trace's size on disk, whole and in pieces.

    python bench/memory.py [--positions 2000] [--max-memory 64MB]

A synthetic DeepSeek-V3.1-shaped trace (labelled synthetic). Each replay runs in a fresh process
(`ecosim replay --policy confidence --json`), and its peak RSS is read from the kernel
(VmHWM of the child). Reported: disk size, the trace's in-memory size (node rows x bytes per
row), and each run's peak RSS, with the ratios. Not a test: RSS depends on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ecosim.catalog import get_model
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import row_bytes


def peak_rss(args: list[str]) -> tuple[float, dict]:
    """Run `ecosim` in a fresh child that reports its own peak RSS; return (bytes, its JSON output)."""
    # VmHWM (not ru_maxrss, which Linux carries across exec from the parent) is this process's own peak.
    code = (
        "import sys; from ecosim.cli import main; rc = main(sys.argv[1:]); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]; "
        "print(hwm, file=sys.stderr); sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return float(out.stderr.strip().splitlines()[-1]) * 1024.0, json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--positions", type=int, default=2000, help="positions per request (8 requests)")
    ap.add_argument("--max-memory", default=None, help="default: what two requests need (a quarter of the trace)")
    args = ap.parse_args()
    path = write_synthetic(Path(tempfile.mkdtemp()) / "ds", get_model("deepseek-v3.1"),
                           SynthConfig(requests=8, positions=args.positions, max_nodes=60, seed=0))
    manifest = json.loads((path / "manifest.json").read_text())
    disk = sum(f.stat().st_size for f in path.iterdir())
    rows = 8 * args.positions * 61
    heap = rows * row_bytes(manifest, gates=False)
    print(f"synthetic deepseek-v3.1 trace: {rows:,} node rows, {disk / 1e6:.1f} MB on disk, {heap / 1e6:.1f} MB as arrays")
    from ecosim.stream import WORKING_SET

    args.max_memory = args.max_memory or f"{2 * args.positions * 61 * row_bytes(manifest, False) * WORKING_SET / 1e6:.0f}MB"
    base = ["replay", str(path), "--policy", "confidence", "--json"]
    whole, a = peak_rss(base)
    pieces, b = peak_rss(base + ["--max-memory", args.max_memory])
    assert a["total"] == b["total"], "pieces must replay exactly what the whole trace replays"
    for name, rss in (("in memory", whole), (f"--max-memory {args.max_memory}", pieces)):
        print(f"  {name:<22} peak RSS {rss / 1e6:8.1f} MB = {rss / disk:5.2f}x disk, {rss / heap:4.2f}x arrays")
    print(f"  pieces / whole: {pieces / whole:.2f}  (same totals: yes)")


if __name__ == "__main__":
    main()
