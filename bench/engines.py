"""The simpy engine against the fast engine on the same no-contention case, and the ratio.

One synthetic Qwen3-30B-A3B trace (2 requests, 32-candidate trees), one request at a time, h200
`hbm`: the case where the two engines must agree to 1e-9 (checked here again; `agree_rel_diff`).
Both engines share the cached selection and walk, so only the engines are timed: the fast engine's
pricing against the event engine, summed over ar, confidence (budget 16) and ecospec (budget 16,
lambda 0.5, oracle predictor). `des_over_fast`: the event engine as `replay --engine des` runs it
here (nothing interleaves, so no events are run: its clock advanced in one compiled loop; target
within 5x); `des_events_over_fast`: the same run with its timeline kept (`--timeline`), every step
and layer an event, which batching and prefetch need.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import Report, synthetic
from ecosim.catalog import get_device
from ecosim.cost import CostConfig
from ecosim.des import DesConfig, des_run
from ecosim.placements import Hbm
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import read_trace


def run(report: Report, cache: Path, quick: bool) -> None:
    positions = 60 if quick else 400
    trace = read_trace(synthetic(cache, "qwen3-30b-a3b", 2, positions, max_nodes=32))
    cost = cost_model(trace, get_device("h200"), Hbm(), CostConfig())
    warm = TraceReplay(trace)
    des_run(warm, PolicySpec("ar"), cost)  # the engines' compiled kernels loaded before timing, as the fast engine's are
    fast_s = des_s = events_s = worst = 0.0
    steps = 0
    for spec in (PolicySpec("ar"), PolicySpec("confidence", 16), PolicySpec("ecospec", 16, 0.5, "oracle")):
        replay = TraceReplay(trace)
        replay.steps(spec)  # both engines share the cached selection and walk
        t0 = time.perf_counter()
        fast = replay.run(spec, cost)
        t1 = time.perf_counter()
        des = des_run(replay, spec, cost).row
        t2 = time.perf_counter()
        events = des_run(replay, spec, cost, DesConfig(timeline=True)).row
        t3 = time.perf_counter()
        fast_s, des_s, events_s, steps = fast_s + t1 - t0, des_s + t2 - t1, events_s + t3 - t2, steps + fast.steps
        worst = max(worst, abs(des.time_s - fast.time_s) / fast.time_s, abs(events.time_s - fast.time_s) / fast.time_s)
    b = "engines"
    report.add(b, "steps", steps, note=f"synthetic qwen3-30b-a3b, {trace.n_trees} positions, 3 policies")
    report.add(b, "fast_s", fast_s, "s")
    report.add(b, "des_s", des_s, "s")
    report.add(b, "des_events_s", events_s, "s")
    report.add(b, "des_over_fast", des_s / fast_s, "x", target="<= 5",
               note="the event engine where nothing interleaves (no events run) over the fast engine")
    report.add(b, "des_events_over_fast", events_s / fast_s, "x",
               note="the event engine running every step and layer as simpy events (--timeline) over the fast engine")
    report.add(b, "agree_rel_diff", worst, "", target="<= 1e-9", note="abs(des - fast) / fast, worst policy")
