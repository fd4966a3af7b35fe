"""Policy quality: time per token of ecospec (best lambda, best predictor) against confidence (best
budget) and against the oracle bound, per trace and per model shape.

Traces: the committed real traces (`traces/*`, recorded from the trained tiny pair), priced on one
H200 (`hbm`, 3.3 TB/s, the README's main command); and synthetic DeepSeek-V3.1-, Qwen3-235B- and
GPT-OSS-120B-shaped traces (4 requests x 250 positions, 60-candidate trees) priced on 8 x H200
(`ep:8`, the setting the EcoSpec numbers are quoted in). Every policy is priced by the fast engine
with the full cost model.

- `confidence_best`: the least time per token of `confidence` over budgets 8, 16, 32, 60.
- `ecospec_best`: the least over lambda > 0 (lambda = 0 is confidence itself), the same budgets
  and the predictors `oracle` (true routing: an upper bound) and `token` (trained on the fly on
  the trace's other requests).
- `oracle`: the shortest-path bound; `ar`: plain decoding.
- ratios: `ecospec_over_confidence` = confidence's time per token / ecospec's (> 1: ecospec is
  faster), `ecospec_of_oracle` and `confidence_of_oracle` = the bound's time / the policy's
  (1 = as fast as any policy can be), `*_speedup_vs_ar` = ar's time / the policy's.
"""

from __future__ import annotations

from pathlib import Path

from bench.common import ROOT, SHAPES, Report, synthetic
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.placement import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import find_traces, read_trace

BUDGETS = (8, 16, 32, 60)
LAMBDAS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
PREDICTORS = ("oracle", "token")
QUICK = {"budgets": (8, 16), "lambdas": (0.1, 0.5), "predictors": ("oracle", "token")}


def best(r: TraceReplay, specs: list[PolicySpec], cost) -> tuple[float, PolicySpec]:
    rows = [(r.run(s, cost), s) for s in specs]
    row, spec = min(rows, key=lambda x: x[0].time_per_token_s)
    return row.time_per_token_s, spec


def one(report: Report, label: str, path: Path, placement: str, bw: float | None, quick: bool) -> None:
    trace = read_trace(path)
    r = TraceReplay(trace)
    device = get_device("h200").replace(hbm_bw=bw)
    cost = cost_model(trace, device, parse_placement(placement), CostConfig())
    budgets = QUICK["budgets"] if quick else BUDGETS
    lambdas = QUICK["lambdas"] if quick else LAMBDAS
    predictors = QUICK["predictors"] if quick else PREDICTORS
    ar = r.run(PolicySpec("ar"), cost).time_per_token_s
    oracle = r.run(PolicySpec("oracle"), cost).time_per_token_s
    conf, conf_spec = best(r, [PolicySpec("confidence", b) for b in budgets], cost)
    eco, eco_spec = best(r, [PolicySpec("ecospec", b, lam, p) for p in predictors for b in budgets for lam in lambdas], cost)
    kind = "synthetic" if trace.synthetic else "real"
    b = f"quality.{label}"
    where = f"{kind}, {trace.model.name}, h200 {placement} {device.hbm_bw / 1e12:.3g} TB/s, {trace.n_trees} positions"
    report.add(b, "ar_ms_per_token", ar * 1e3, "ms", note=where)
    report.add(b, "oracle_ms_per_token", oracle * 1e3, "ms")
    report.add(b, "confidence_best_ms_per_token", conf * 1e3, "ms", note=f"budget {conf_spec.budget}")
    report.add(b, "ecospec_best_ms_per_token", eco * 1e3, "ms",
               note=f"budget {eco_spec.budget}, lambda {eco_spec.lam:g}, predictor {eco_spec.predictor}")
    report.add(b, "ecospec_over_confidence", conf / eco, "x")
    report.add(b, "ecospec_of_oracle", oracle / eco, "of bound")
    report.add(b, "confidence_of_oracle", oracle / conf, "of bound")
    report.add(b, "ecospec_speedup_vs_ar", ar / eco, "x")
    report.add(b, "confidence_speedup_vs_ar", ar / conf, "x")


def run(report: Report, cache: Path, quick: bool, requests: int = 4, positions: int = 250) -> None:
    for path in find_traces([str(ROOT / "traces")]):
        one(report, path.name, path, "hbm", 3.3e12, quick)
    for shape in SHAPES:
        one(report, shape, synthetic(cache, shape, requests, positions), "ep:8", None, quick)
