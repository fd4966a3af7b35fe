"""Each policy's replay cold and warm against one numpy union pass, evict against confidence on
large trees, and the peak memory of an all-policy replay against the trace's size: ratios measured
back to back in one run.

Traces (synthetic, `ecosim synth`, seed 0, DeepSeek-V3.1's shape and shipped routing preset):
`small`, 2 requests x 512 positions of 64-candidate trees (about 31 MB on disk), and `wide`, 2
requests x 128 positions of 257-node trees (depth 16, top-16: 256 candidates besides the root).
Pricing: h200, `tp:8` (the placement DeepSeek-V3.1 is served on).

- `union_pass_s`: the floor a replay is held to. For every tree and MoE layer, the distinct experts
  of all its nodes: one numpy presence scatter of the trace's (rows, layers, top-k) routing into a
  (trees, layers, experts) table, a few thousand trees at a time, and a count. It reads every
  routed id once, as a replay that unions every tree must.
- per policy, `cold_over_union`: seconds of `TraceReplay(trace).run` on a fresh replay of an
  already-read trace (trees, predictions and the k-fold predictor fits, ranks, tables: all the
  per-trace work; reading Parquet not), over the union pass; best of `repeat`.
- `warm_over_union`: a new configuration on a replay whose per-trace work is done (`forget()`
  drops the selections, walks, unions and priced rows: select, walk, union and price again),
  over the union pass; best of `repeat`. What every configuration after the first pays.
- `api_repeat_over_union`: `ecosim.replay(trace, policy=P, placement="tp:8")` called again on
  the same Trace object (ar and the oracle included, as the function runs them).
- `wide.evict_over_confidence`: evict's cold seconds over confidence's (budget 16) on the wide
  trees, each the best of 10 fresh replays (a few milliseconds each, so one scheduler hiccup is
  a large share of one); `wide.evict_over_union` over the union pass of those trees. Beyond confidence's work evict
  fits the calibrated values, profiles C(k) on a few positions (policies/evict.py) and prices its
  own selection, about ten times confidence's nodes on these trees.
- memory: `all_policy_peak_mb`, the peak RSS of `ecosim replay SMALL --placement tp:8 --json`
  (every policy, a fresh process), `baseline_mb` the same process's peak for `ecosim --help`,
  and `beyond_baseline_over_disk`, (peak - baseline) / the trace's bytes on disk. `fixed_mb` is
  the same replay of a 2 x 8-position trace beyond the baseline: what a replay holds whatever the
  trace's size (the compiled kernels and the code a replay loads beyond `--help`). On this 31 MB
  trace it is most of the peak beyond the baseline; the ratio's target is measured on a large trace
  (memory.py).

Targets: ecospec and ecospec-auto warm <= 2.5x and cold <= 5x the union pass; evict <= 3x
confidence; the all-policy peak under 400 MB.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import ecosim
from bench.common import Report, best_of, disk_bytes, peak_rss, synthetic
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import Trace, read_trace

MODEL = "deepseek-v3.1"
WIDE_REPEAT = 10  # fresh replays of each policy on the wide trees, the least kept: each takes milliseconds
PLACEMENT = "tp:8"
# Each policy at `ecosim replay`'s defaults (ecospec: budget 16, lambda 0.5, the token predictor
# trained on the fly), and ecospec given the true routing (no predictor to fit).
POLICIES = {
    "ar": (PolicySpec("ar"), None, None),
    "confidence": (PolicySpec("confidence"), None, None),
    "ecospec": (PolicySpec("ecospec"), 2.5, 5.0),
    "ecospec_oracle": (PolicySpec("ecospec", predictor="oracle"), 2.5, 5.0),
    "ecospec_auto": (PolicySpec("ecospec-auto"), 2.5, 5.0),
    "evict": (PolicySpec("evict"), None, None),
    "oracle": (PolicySpec("oracle"), None, None),
}


def union_pass(trace: Trace, chunk: int = 256) -> np.ndarray:
    """(trees, layers) distinct experts of every tree's nodes (see the module docstring)."""
    m = trace.model
    L, E = m.num_moe_layers, m.num_experts
    ex = trace.experts_3d()
    start = trace.tree_start
    out = np.empty((trace.n_trees, L), dtype=np.int64)
    lane = (np.arange(L, dtype=np.int64) * (E + 1))[None, :, None]
    for a in range(0, trace.n_trees, chunk):
        b = min(a + chunk, trace.n_trees)
        e = ex[start[a] : start[b]]
        tree = np.repeat(np.arange(b - a, dtype=np.int64) * (L * (E + 1)), np.diff(start[a : b + 1]))
        seen = np.zeros((b - a) * L * (E + 1), dtype=bool)  # one column past the experts takes the pads
        seen[(tree[:, None, None] + lane + np.where(e >= 0, e, E)).ravel()] = True
        out[a:b] = np.count_nonzero(seen.reshape(b - a, L, E + 1)[..., :E], axis=-1)
    return out


def run(report: Report, cache: Path, quick: bool, repeat: int) -> None:
    small = synthetic(cache, MODEL, 2, 64 if quick else 512, max_nodes=64)
    wide = synthetic(cache, MODEL, 2, 16 if quick else 128, max_nodes=256, extra=("--depth", "16", "--topk", "16"))
    b = "speed"
    trace = read_trace(small)
    cost = cost_model(trace, get_device("h200"), parse_placement(PLACEMENT), CostConfig())
    floor = best_of(3, lambda: union_pass(trace))
    report.add(b, "union_pass_s", floor, "s", note=f"{trace.n_trees:,} trees, {len(trace.nodes['node']):,} node rows; "
               f"{disk_bytes(small) / 1e6:.0f} MB on disk; synthetic")
    for name, (spec, warm_target, cold_target) in POLICIES.items():
        colds = []
        for _ in range(repeat):
            fresh = TraceReplay(trace)
            t0 = time.perf_counter()
            fresh.run(spec, cost)
            colds.append(time.perf_counter() - t0)
        warm = best_of(repeat, lambda: fresh.run(spec, cost), before=fresh.forget)
        report.add(b, f"{name}.cold_over_union", min(colds) / floor, "x", target=cold_target and f"<= {cold_target}",
                   note=f"{min(colds):.3f} s")
        report.add(b, f"{name}.warm_over_union", warm / floor, "x", target=warm_target and f"<= {warm_target}",
                   note=f"{warm:.3f} s")
        if not spec.policy.is_bound:
            call = dict(policy=spec.name, placement=PLACEMENT, **{k.name: spec.values[k.name] for k in spec.policy.knobs})
            ecosim.replay(trace, **call)
            again = best_of(repeat, lambda: ecosim.replay(trace, **call))
            report.add(b, f"{name}.api_repeat_over_union", again / floor, "x", note=f"{again:.3f} s")

    trace = read_trace(wide)
    cost = cost_model(trace, get_device("h200"), parse_placement(PLACEMENT), CostConfig())
    secs = {}
    for name in ("confidence", "evict"):
        secs[name] = min(_timed(lambda: TraceReplay(trace).run(PolicySpec(name), cost)) for _ in range(max(repeat, WIDE_REPEAT)))
    wide_floor = best_of(3, lambda: union_pass(trace))
    report.add(b, "wide.evict_over_confidence", secs["evict"] / secs["confidence"], "x", target="<= 3",
               note=f"{int(trace.positions['n_nodes'].max())}-node trees, {trace.n_trees} trees: evict {secs['evict']:.3f} s, "
                    f"confidence {secs['confidence']:.3f} s, each on a fresh replay")
    report.add(b, "wide.evict_over_union", secs["evict"] / wide_floor, "x",
               note=f"the union pass over the same trees: {wide_floor:.3f} s")

    base, _ = peak_rss(["--help"], parse=False)
    peak, _ = peak_rss(["replay", str(small), "--placement", PLACEMENT, "--json"])
    disk = disk_bytes(small)
    report.add(b, "baseline_mb", base / 1e6, "MB", note="the interpreter with ecosim's CLI loaded (ecosim --help)")
    report.add(b, "all_policy_peak_mb", peak / 1e6, "MB", target="< 400", note="every policy, default knobs, tp:8")
    tiny = synthetic(cache, MODEL, 2, 8, max_nodes=64)
    fixed, _ = peak_rss(["replay", str(tiny), "--placement", PLACEMENT, "--json"])
    report.add(b, "beyond_baseline_over_disk", (peak - base) / disk, "x",
               note="the target (< 3x) is on the large trace: memory.all_policy_beyond_baseline_over_disk")
    report.add(b, "fixed_mb", (fixed - base) / 1e6, "MB",
               note=f"the same replay of a 2 x 8-position trace ({disk_bytes(tiny) / 1e6:.1f} MB) beyond the baseline: "
                    "held whatever the trace's size")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
