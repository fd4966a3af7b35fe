"""Replay throughput of the fast engine per policy against one numpy pass over the packed routing.

For each synthetic shape (DeepSeek-V3.1, Qwen3-235B-A22B, GPT-OSS-120B; 10 requests x 1,000
positions, 60-candidate trees in the full run), on h200/hbm:

- `numpy_pass`: the least of 3 `np.bitwise_or.reduce(experts, axis=0)` over the trace's (rows,
  moe_layers x top_k) int16 routing array: reading the routing once, the limit a replay is held to.
- per policy, `warm`: the least of `repeat` `TraceReplay.run` calls after `forget()` (select, walk,
  union and price again) on a replay whose per-trace preparation is done, as every configuration
  after the first sees it in a sweep; `cold`: the least of `repeat` runs, each on a fresh
  TraceReplay (trees, the predictor's offsets, confidence ranks or the oracle's chain unions
  included; reading the Parquet files not). The first of them is noted: on a microVM whose memory
  the host backs lazily, the first touch of fresh memory costs seconds per GB (host page faults),
  which says more about the VM than about the replay.
- ratios: numpy-pass seconds / policy seconds (= policy positions/s over numpy-pass positions/s).
  Targets: ar, confidence and oracle >= 1/3, ecospec >= 1/10.

Single-threaded numpy on both sides, so positions/s are per core.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.common import Report, best_of
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.placements import Hbm
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import Trace, read_trace

# `ecosim replay`'s defaults (budget 16, lambda 0.5) with the oracle predictor, and a small lambda
# where ecospec grows deep trees (the expensive end of a lambda sweep).
POLICIES = {
    "ar": (PolicySpec("ar"), 1 / 3),
    "confidence": (PolicySpec("confidence", 16), 1 / 3),
    "ecospec": (PolicySpec("ecospec", 16, 0.5, "oracle"), 1 / 10),
    "ecospec_lam0.1": (PolicySpec("ecospec", 16, 0.1, "oracle"), 1 / 10),
    "oracle": (PolicySpec("oracle"), 1 / 3),
    "ecospec_auto": (PolicySpec("ecospec-auto", predictor="oracle"), 1 / 10),
}


def prepare(r: TraceReplay, spec: PolicySpec, cost=None) -> None:
    """The per-trace work a sweep shares across configurations."""
    t = r.trees
    _ = t.cum_logprob, t.accepted, t.accept_len, t.chain, t.tree_of_row, t.levels
    if spec.policy.is_bound:
        r.chain_unions()
    else:  # a selection leaves its per-trace work (ranks, predictions, offsets) behind; forget the rest
        r.selection(spec, cost if spec.policy.priced else None)
        r.forget()


def measure(report: Report, label: str, path: Path, repeat: int) -> Trace:
    t0 = time.perf_counter()
    trace = read_trace(path)
    load = time.perf_counter() - t0
    n = trace.n_trees
    experts = trace.nodes["experts"]
    b = f"replay.{label}"
    report.add(b, "positions", n, note=f"{experts.shape[0]:,} node rows x {experts.shape[1]} {experts.dtype} experts, "
               f"{experts.nbytes / 1e6:.0f} MB; synthetic")
    report.add(b, "read_s", load, "s", note="reading and checking the Parquet trace (not in any figure below)")
    t_np = best_of(3, lambda: np.bitwise_or.reduce(experts, axis=0))
    report.add(b, "numpy_pass_pos_per_s", n / t_np, "pos/s", note=f"{t_np * 1e3:.0f} ms per pass")
    # the replay's speed on a full model's shape; one H200 cannot hold DeepSeek-V3.1 (not a deployment)
    cost = cost_model(trace, get_device("h200"), Hbm(), CostConfig(), check=False)
    for name, (spec, target) in POLICIES.items():
        colds = []
        for _ in range(repeat):
            r = TraceReplay(trace)
            t0 = time.perf_counter()
            r.run(spec, cost)
            colds.append(time.perf_counter() - t0)
        cold = min(colds)
        prepare(r, spec, cost)
        warm = best_of(repeat, lambda: r.run(spec, cost), before=r.forget)
        report.add(b, f"{name}.warm_pos_per_s", n / warm, "pos/s")
        report.add(b, f"{name}.warm_ratio", t_np / warm, "x numpy", target=f">= {target:.3f}")
        report.add(b, f"{name}.cold_ratio", t_np / cold, "x numpy", target=f">= {target:.3f}",
                   note=f"{cold:.2f} s on a fresh replay, best of {repeat}; the first took {colds[0]:.2f} s")
    return trace
