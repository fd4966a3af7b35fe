"""Replay throughput of the fast engine against one numpy pass over the trace, and a sweep's time.

    .venv/bin/python bench/replay_throughput.py                 # the whole benchmark (~10+ min on 2 cores)
    .venv/bin/python bench/replay_throughput.py --no-sweep      # throughput only
    .venv/bin/python bench/replay_throughput.py --profile ecospec   # cProfile one policy's replay

The trace is synthetic (DeepSeek-V3.1 shape: 58 MoE layers x 256 experts, top-8), made once with
`ecosim synth DIR --model deepseek-v3.1 --requests R --positions P --max-nodes N` into a cache
directory and reused. Figures:

- numpy pass: the best of 3 of `np.bitwise_or.reduce(experts, axis=0)` and of `experts.sum(axis=0)`
  over the (rows, 464) int16 routing array: the time to read the trace's routing once. Its rate is
  positions / that time.
- per policy (ar, confidence, ecospec with the oracle predictor, oracle), `TraceReplay.run` on h200/hbm,
  best of `--repeat`: "warm" on a replay whose per-trace preparation (trees, and for ecospec the
  predictor's expert offsets, for confidence the rank of every node, for the oracle the unions of
  the accepted chains) is already done, as every configuration after the first sees it in a sweep;
  "cold" on a fresh TraceReplay (that preparation included). Rate = positions / seconds.
  Ratios are rate / numpy-pass rate; targets: ar, confidence, oracle >= 1/3, ecospec >= 1/10.
- sweep: a ~1,000-configuration `ecosim sweep` over the trace (--jobs N), wall seconds; target < 600.

Single-threaded numpy on both sides; timings on a shared machine are noisy, so the ratios (taken in
the same run, back to back) are the figures to read.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.placement import Placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import read_trace

ROOT = Path(__file__).resolve().parent.parent
POLICIES = {
    "ar": PolicySpec("ar"),
    "confidence": PolicySpec("confidence", 16),
    "ecospec": PolicySpec("ecospec", 16, 0.5, "oracle"),
    "oracle": PolicySpec("oracle"),
}
TARGET = {"ar": 1 / 3, "confidence": 1 / 3, "ecospec": 1 / 10, "oracle": 1 / 3}
SWEEP = ["--lambda", "0:2:0.08", "--budget", "8,16,32,60", "--predictor", "oracle", "--bw", "2TB/s,3.3TB/s,4.8TB/s",
         "--placement", "hbm,ep:8,offload:64", "--hardware", "h200"]


def trace_dir(cache: Path, requests: int, positions: int, max_nodes: int) -> Path:
    d = cache / f"deepseek-v3.1-r{requests}-p{positions}-n{max_nodes}"
    if not (d / "manifest.json").is_file():
        print(f"generating {d} (once) ...", flush=True)
        subprocess.run([sys.executable, "-m", "ecosim.cli", "synth", str(d), "--model", "deepseek-v3.1", "--requests",
                        str(requests), "--positions", str(positions), "--max-nodes", str(max_nodes)], check=True)
    return d


def best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def prepare(r: TraceReplay, name: str) -> None:
    """The per-trace work a sweep shares across configurations."""
    t = r.trees
    _ = t.cum_logprob, t.accepted, t.accept_len, t.chain, t.tree_of_row, t.levels
    if name == "ecospec":
        r.selection(PolicySpec("ecospec", 1, 0.5, "oracle"))  # builds the predictor's cached inputs
    if name == "confidence":
        r.confidence_rank()  # one sort per trace, whatever the budget
    if name == "oracle":
        r.chain_unions()  # the accepted chains' unions, whatever the cost model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ecosim-bench",
                    help="Where the synthetic trace is generated once and reused.")
    ap.add_argument("--requests", type=int, default=10, help="Requests of the synthetic trace.")
    ap.add_argument("--positions", type=int, default=1000, help="Positions per request.")
    ap.add_argument("--max-nodes", type=int, default=60, help="Candidates per tree besides the root.")
    ap.add_argument("--repeat", type=int, default=3, help="Timed runs per policy (the best is kept).")
    ap.add_argument("--policies", default="ar,confidence,ecospec,oracle", help="Comma list of policies to time.")
    ap.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=True, help="Also time a ~1,000-configuration sweep.")
    ap.add_argument("--jobs", type=int, default=2, help="Sweep worker processes.")
    ap.add_argument("--profile", choices=sorted(POLICIES), help="cProfile one warm replay of this policy and stop.")
    ap.add_argument("--json", type=Path, help="Also write the figures to this JSON file.")
    args = ap.parse_args()

    path = trace_dir(args.cache, args.requests, args.positions, args.max_nodes)
    t0 = time.perf_counter()
    trace = read_trace(path)
    load_s = time.perf_counter() - t0
    n = trace.n_trees
    experts = trace.nodes["experts"]
    cost = cost_model(trace, get_device("h200"), Placement(), CostConfig())

    if args.profile:
        r = TraceReplay(trace)
        prepare(r, args.profile)
        spec = POLICIES[args.profile]
        prof = cProfile.Profile()
        prof.enable()
        r.run(spec, cost)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return 0

    t_or = best_of(3, lambda: np.bitwise_or.reduce(experts, axis=0))
    t_sum = best_of(3, lambda: experts.sum(axis=0, dtype=np.int64))
    print(f"trace {path.name}: {n} positions, {experts.shape[0]} node rows x {experts.shape[1]} int16 experts "
          f"({experts.nbytes / 1e6:.0f} MB), loaded in {load_s:.1f} s; synthetic")
    print(f"numpy pass: bitwise_or.reduce {t_or * 1e3:.1f} ms ({n / t_or:,.0f} positions/s), "
          f"sum {t_sum * 1e3:.1f} ms ({n / t_sum:,.0f} positions/s)")
    out: dict = {"trace": str(path), "positions": n, "rows": int(experts.shape[0]), "numpy_or_s": t_or, "numpy_sum_s": t_sum,
                 "policies": {}}
    print(f"{'policy':<11} {'warm s':>8} {'pos/s':>10} {'vs or':>7} {'vs sum':>7} {'cold s':>8} {'vs or':>7}  target (vs or)")
    for name in args.policies.split(","):
        spec = POLICIES[name]
        r = TraceReplay(trace)
        t_cold0 = time.perf_counter()
        r.run(spec, cost)
        cold = time.perf_counter() - t_cold0
        prepare(r, name)

        def warm() -> None:
            r._steps.clear()  # drop the cached walk/unions: select, walk, union and price again
            r.run(spec, cost)

        w = best_of(args.repeat, warm)
        ratio_or, ratio_sum, ratio_cold = t_or / w, t_sum / w, t_or / cold
        ok = "ok" if ratio_or >= TARGET[name] else "MISSED"
        print(f"{name:<11} {w:8.3f} {n / w:10,.0f} {ratio_or:7.3f} {ratio_sum:7.3f} {cold:8.3f} {ratio_cold:7.3f}  "
              f">= {TARGET[name]:.3f} {ok}", flush=True)
        out["policies"][name] = {"warm_s": w, "cold_s": cold, "ratio_vs_or": ratio_or, "ratio_vs_sum": ratio_sum,
                                 "ratio_cold_vs_or": ratio_cold, "target": TARGET[name]}
    del trace, experts

    if args.sweep:
        with tempfile.TemporaryDirectory(prefix="ecosim-bench-sweep-") as tmp:
            cmd = [sys.executable, "-m", "ecosim.cli", "sweep", str(path), "--out", tmp, "--jobs", str(args.jobs), "--json", *SWEEP]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            if res.returncode != 0:
                print(res.stderr, file=sys.stderr)
                return 1
            summary = json.loads(res.stdout)
        print(f"sweep: {summary['configurations']} configurations ({summary['tasks_run']} tasks) in {wall:.1f} s wall "
              f"with --jobs {args.jobs} (target < 600 s): {'ok' if wall < 600 else 'MISSED'}; {cpu:.0f} CPU seconds "
              f"in all ({cpu / args.jobs:.0f} s per core if the cores were free)")
        out["sweep"] = {"configurations": summary["configurations"], "tasks": summary["tasks_run"], "wall_s": wall,
                        "cpu_s": cpu, "jobs": args.jobs, "args": SWEEP}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
