"""`bench/run` (or `python -m bench`): every benchmark (replay, engines, sweeps, tracer, memory, quality), one table, one JSON file.

    bench/run                       # the full run (about 10 minutes on 2 cores, plus ~2 minutes generating
                                    # the synthetic traces the first time; they are cached)
    bench/run --quick               # small sizes, a smoke test (under a minute; tests/test_bench.py)
    bench/run --only replay,engines --json out.json

Benchmarks, in the order they run (each module's docstring defines its figures):

    replay     replay_throughput.py  positions/s per policy vs one numpy pass over the routing, 3 shapes
    speed      speed.py              each policy cold and warm vs a numpy union pass, evict vs confidence on
                                     257-node trees, all-policy peak RSS vs the trace's size
    engines    engines.py            simpy engine vs fast engine on a no-contention case
    sweep      sweeps.py             configurations per minute, local executor and Ray (2 CPUs)
    sweep1000  sweeps.py             the 1,000-configuration sweep over the 10k-position DeepSeek trace
    tracer     tracer_hooks.py       router hooks on vs off on a tiny model's verification forward
    memory     memory.py             peak RSS of a replay vs the trace on disk; --max-memory in pieces
    quality    quality.py            time per token: ecospec (best) vs confidence (best) vs the oracle
    quality-host quality_host.py     the same question with the experts in host memory (cpu-moe, cpu)

Every figure is printed as it is measured and again in one table at the end; `--json FILE` writes
them all with the run's date, machine and command. Timings on a shared machine are noisy: read the
ratios, which are measured back to back within one run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, ROUTING, SHAPES, Report, synthetic

BENCHES = ("replay", "speed", "engines", "sweep", "sweep1000", "tracer", "memory", "quality", "quality-host")


def machine() -> dict[str, object]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    import numpy as np

    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "commit": commit, "load_average": os.getloadavg()}


def table(report: Report) -> str:
    rows = [("figure", "value", "unit", "target", "")]
    for f in report.figures:
        met = "" if f.met is None else ("met" if f.met else "MISSED")
        rows.append((f"{f.bench}.{f.name}", _short(f.value), f.unit, f.target or "", met))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i != 1 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _short(x: float) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == int(x) and abs(x) < 1e12:
        return f"{int(x):,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Small sizes everywhere: a smoke test, not a measurement.")
    ap.add_argument("--only", default=",".join(BENCHES), help=f"Comma list of benchmarks to run ({', '.join(BENCHES)}).")
    ap.add_argument("--json", type=Path, help="Also write every figure (and the run's date, machine, command) to this file.")
    ap.add_argument("--jobs", type=int, default=2, help="Worker processes for the sweeps (and Ray CPUs).")
    ap.add_argument("--repeat", type=int, default=None, help="Warm replays per policy, the least kept (default 3; 1 with --quick).")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ecosim-bench",
                    help="Where synthetic traces are generated once and reused.")
    ap.add_argument("--routing", type=Path, default=ROUTING,
                    help="Real gpt-oss-20b routing for the hybrid trace of the quality benchmark (default: "
                         "../shared/data/gpt-oss-20b-routing beside the repository; skipped, said so, where absent).")
    args = ap.parse_args(argv)
    only = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = [b for b in only if b not in BENCHES]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHES)}")
    cache = args.cache / ("quick" if args.quick else "full")
    cache.mkdir(parents=True, exist_ok=True)
    repeat = args.repeat or (1 if args.quick else 3)
    requests, positions = (4, 50) if args.quick else (10, 1000)

    report = Report(meta={
        "command": "bench/run " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "quick": args.quick, "benches": only,
        "synthetic_traces": f"{requests} requests x {positions} positions, 60-candidate trees (ecosim synth, seed 0, "
                            "each shape's shipped routing preset)"
                            + ("" if args.quick else "; the quality bench's: 16 requests x 250 positions"),
        "routing": str(args.routing) if args.routing.is_dir() else None,
    })
    t_start = time.perf_counter()

    def deepseek() -> Path:
        return synthetic(cache, "deepseek-v3.1", requests, positions)

    for name in only:
        print(f"[{name}]", flush=True)
        t0 = time.perf_counter()
        try:
            if name == "replay":
                from bench import replay_throughput

                for shape in SHAPES:
                    replay_throughput.measure(report, shape, synthetic(cache, shape, requests, positions), repeat)
            elif name == "speed":
                from bench import speed

                speed.run(report, cache, args.quick, repeat)
            elif name == "engines":
                from bench import engines

                engines.run(report, cache, args.quick)
            elif name == "sweep":
                from bench import sweeps

                sweeps.run_executors(report, args.quick, args.jobs)
            elif name == "sweep1000":
                from bench import sweeps

                sweeps.run_1000(report, deepseek(), args.quick, args.jobs)
            elif name == "tracer":
                from bench import tracer_hooks

                tracer_hooks.run(report, args.quick)
            elif name == "memory":
                from bench import memory

                memory.run(report, deepseek())
            elif name == "quality":
                from bench import quality

                quality.run(report, cache, args.quick, *((requests, positions) if args.quick else (16, 250)), routing=args.routing)
            elif name == "quality-host":
                from bench import quality_host

                quality_host.run(report, cache, args.quick, *((requests, positions) if args.quick else (16, 250)), routing=args.routing)
        except ImportError as e:  # an optional extra (torch, ray) that is not installed
            report.skipped[name] = f"needs {e.name or e}: pip install -e '.[models,ray]'"
            print(f"  skipped: {report.skipped[name]}", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)

    report.meta["wall_s"] = time.perf_counter() - t_start
    report.meta["load_average_after"] = os.getloadavg()
    print()
    print(f"bench/run{' --quick' if args.quick else ''}: {len(report.figures)} figures in {report.meta['wall_s']:.0f} s, "
          f"{report.meta['date']}, {report.meta['machine']['cpu']} x {report.meta['machine']['cores']} cores, "
          f"load average {report.meta['machine']['load_average'][0]:.1f} at the start")
    print(table(report))
    for name, why in report.skipped.items():
        print(f"skipped {name}: {why}")
    if args.json:
        args.json.write_text(report.to_json() + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
