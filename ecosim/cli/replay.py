"""`ecosim replay`: replay policies over traces under a hardware and placement model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ecosim.cli import app, fail, wide_console
from ecosim.cli.options import (
    Bw, BwEff, ComputeEff, CostMode, Devices, DraftTime, Hardware, HardwareArgs, LinkBw, Overhead,
    PcieBw, Peak, Placement, cost_config, placement_text,
)
from ecosim.cost import NOT_MODELLED
from ecosim.metrics import Row
from ecosim.placement import parse_placement
from ecosim.policies import POLICIES, PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import PolicyResult, compare
from ecosim.stream import StreamedReplay
from ecosim.units import parse_quantity
from ecosim.trace.io import find_traces, read_trace

DEFAULT_PREDICTOR = "token"


def _row_json(row: Row) -> dict[str, object]:
    return row.to_dict()


def _table(results: list[PolicyResult], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col, just in (("trace", "left"), ("data", "left"), ("policy", "left"), ("tokens/step", "right"),
                      ("experts/step", "right"), ("GB/token", "right"), ("ms/token", "right"),
                      ("speedup vs ar", "right"), ("of oracle", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    n = len(results[0].rows)
    names = [r.trace for r in results[0].rows] + (["total"] if n > 1 else [])
    for i, name in enumerate(names):
        for j, res in enumerate(results):
            row = res.rows[i] if i < n else res.total
            kind = "synthetic" if row.synthetic else "real"
            if i == n:
                kind = "mixed" if any(r.synthetic for r in res.rows) and not all(r.synthetic for r in res.rows) else kind
            t.add_row(
                name if j == 0 else "", kind if j == 0 else "", res.spec.label(),
                f"{row.tokens_per_step:.3f}", f"{row.experts_per_step:.1f}",
                f"{row.expert_bytes_per_token / 1e9:.4g}", f"{row.time_per_token_s * 1e3:.4g}",
                f"{row.speedup_vs_ar:.3f}x" if row.speedup_vs_ar else "-",
                f"{row.oracle_fraction:.3f}" if row.oracle_fraction else "-",
                end_section=j == len(results) - 1,
            )
    return t


@app.command()
def replay(
    traces: Annotated[list[Path], typer.Argument(help="Trace directories, or directories holding traces (searched recursively).")],
    policy: Annotated[str | None, typer.Option(help="ar, confidence, ecospec or oracle; default: all four side by side.")] = None,
    budget: Annotated[int, typer.Option(help="Nodes a step may verify besides the root (EAGLE's total_token - 1).")] = 16,
    lam: Annotated[float, typer.Option("--lambda", help="ecospec's cost weight: value - lambda x (new experts / (moe_layers x top_k)).")] = 0.5,
    predictor: Annotated[str, typer.Option(help="Expert predictor ecospec scores with: token, freq or context (trained on the fly on the trace's other requests, k-fold), a predictor file from `ecosim predictor train`, oracle (true routing, an upper bound) or none.")] = DEFAULT_PREDICTOR,
    score: Annotated[str, typer.Option(help="ecospec's score: difference (value - lambda*cost) or ratio (value / (1 + lambda*cost)).")] = "difference",
    hardware: Hardware = "h200",
    bw: Bw = None,
    peak: Peak = None,
    link_bw: LinkBw = None,
    pcie_bw: PcieBw = None,
    placement: Placement = "hbm",
    devices: Devices = None,
    cost: CostMode = "full",
    bw_efficiency: BwEff = 0.8,
    compute_efficiency: ComputeEff = 0.5,
    step_overhead: Overhead = "30us",
    draft_time: DraftTime = None,
    engine: Annotated[str, typer.Option(help="fast (vectorised numpy) or des (simpy events: batching, prefetch, per-device timelines).")] = "fast",
    arrivals: Annotated[str, typer.Option(help="des only: sequential, together, poisson:RATE (requests/s) or a JSON file of arrival seconds.")] = "sequential",
    max_batch: Annotated[int, typer.Option(min=1, help="des only: requests verified together in one step.")] = 1,
    prefetch: Annotated[bool, typer.Option(help="des only, offload: copy the next layer's misses while this layer computes.")] = False,
    timeline: Annotated[Path | None, typer.Option(help="des only: write a Chrome/Perfetto trace of the first trace's timeline to FILE.")] = None,
    max_memory: Annotated[str | None, typer.Option(help="Replay in pieces of whole requests within this much memory, e.g. 2GB (fast engine).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
) -> None:
    """Replay selection policies over recorded (or synthetic) traces and compare them.

    Every policy's time is compared with plain decoding (`ar`) and with the oracle bound under the
    same cost model. Real and synthetic traces are labelled in the output.
    """
    if policy is not None and policy not in POLICIES:
        fail(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if engine not in ("fast", "des"):
        fail(f"--engine must be fast or des, got {engine!r}")
    if engine == "fast" and (timeline or prefetch or max_batch > 1 or arrivals != "sequential"):
        fail("--timeline, --prefetch, --max-batch and --arrivals need --engine des")
    spec = PolicySpec(policy or "ecospec", budget, lam, predictor, score)  # type: ignore[arg-type]
    specs = [spec] if policy else [PolicySpec(p, budget, lam, predictor, score) for p in POLICIES]  # type: ignore[arg-type]
    device = HardwareArgs(hardware, bw, peak, link_bw, pcie_bw).device()
    place = parse_placement(placement_text(placement, devices))
    config = cost_config(cost, bw_efficiency, compute_efficiency, step_overhead, draft_time)
    if any(s.name == "ecospec" for s in specs):
        from ecosim.predictors import get_predictor
        get_predictor(predictor)  # fail early on an unknown predictor
    paths = find_traces([str(p) for p in traces])
    if max_memory:
        if engine == "des":
            fail("--max-memory replays with the fast engine only")
        budget_bytes = parse_quantity(max_memory, "bytes")
        replays = [StreamedReplay(p, budget_bytes) for p in paths]
    else:
        replays = [TraceReplay(read_trace(p)) for p in paths]

    if engine == "des":
        results = _des(replays, specs, device, place, config, arrivals, max_batch, prefetch, timeline)
    else:
        work = len(replays) * (len(specs) + 2)
        with Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as bar:
            task = bar.add_task("replaying", total=work)
            results = compare(replays, specs, device, place, config, progress=lambda: bar.advance(task))
    hw = {**device.to_dict(), "placement": str(place), "cost_mode": config.mode, "engine": engine,
          "not_modelled": list(NOT_MODELLED)}
    if as_json:
        main = next(r for r in results if r.spec == spec) if policy else next(r for r in results if r.spec.name == "ecospec")
        out = {
            "policy": main.spec.name, "budget": spec.budget, "lambda": spec.lam, "predictor": spec.predictor,
            "score": spec.score, "placement": str(place), "hardware": hw,
            "traces": [_row_json(r) for r in main.rows], "total": _row_json(main.total),
        }
        if not policy:
            out["compare"] = {r.spec.name: {"traces": [_row_json(x) for x in r.rows], "total": _row_json(r.total)} for r in results}
        print(json.dumps(out, indent=1))
        return
    console = wide_console()
    title = (f"{device.name}, {device.hbm_bw / 1e12:.4g} TB/s, {place}, cost {config.mode}, engine {engine}"
             f"; ecospec predictor: {predictor}")
    console.print(_table(results, title))
    console.print(f"[dim]not modelled: {'; '.join(NOT_MODELLED)}[/dim]")
    if any(r.synthetic for r in results[0].rows):
        console.print("[yellow]synthetic traces are generated, not measured: their figures illustrate the model only[/yellow]")
    if place.kind == "offload":
        console.print("[dim]the oracle under offload prices every expert as a cache hit (a looser lower bound)[/dim]")


def _des(replays, specs, device, place, config, arrivals, max_batch, prefetch, timeline) -> list[PolicyResult]:
    """The event engine for the selection policies; ar and the oracle bound for the ratios."""
    from ecosim.des import DesConfig, des_run
    from ecosim.metrics import total
    from ecosim.simulate import AR, ORACLE, cost_model

    cfg = DesConfig(arrivals, max_batch, prefetch)
    ar = [des_run(r, AR, cost_model(r.trace, device, place, config), cfg).row for r in replays]
    oracle = [r.run(ORACLE, cost_model(r.trace, device, place, config)) for r in replays]
    out = []
    for spec in specs:
        if spec.name == "oracle":
            rows = oracle
        else:
            runs = [des_run(r, spec, cost_model(r.trace, device, place, config), cfg) for r in replays]
            rows = [x.row for x in runs]
            if timeline and spec == specs[-1 if specs[-1].name != "oracle" else -2]:
                timeline.write_text(json.dumps({"traceEvents": runs[0].events, "displayTimeUnit": "ms"}))
        for row, a, o in zip(rows, ar, oracle):
            row.compare(a, o)
        out.append(PolicyResult(spec, rows, total(rows).compare(total(ar), total(oracle))))
    return out
