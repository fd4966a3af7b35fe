"""`ecosim replay`: replay policies over traces under a hardware and placement model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ecosim.cli import app, fail, listed, wide_console
from ecosim.cli.adapter import knob_options, with_options
from ecosim.cli.hints import knob_hints
from ecosim.cli.options import (
    Bw, Devices, DraftSteps, Hardware, HardwareArgs, LinkBw, PcieBw, Peak, Placement, cost_config, cost_options, placement_text,
    used_text,
)
from ecosim.cost import NOT_MODELLED
from ecosim.des import DesConfig, DesReplay
from ecosim.metrics import Row
from ecosim.outputs import TIMELINE, check_output
from ecosim.placements import parse_placement
from ecosim.plots import check_plot, plot_replay
from ecosim.policies import PolicySpec, registry
from ecosim.replay import TraceReplay
from ecosim.simulate import Engine, PolicyResult, at_steps, compare, cost_model, step_draft_time
from ecosim.stream import STREAM_SHARE, StreamedReplay, stream_plan
from ecosim.units import parse_quantity
from ecosim.verdict import verdict
from ecosim.trace.io import find_traces, read_trace
from ecosim.trace.schema import MANIFEST, provenance_notes



def _size(budget: float) -> str:
    """A --max-memory value for `budget` bytes."""
    return f"{budget / 1e9:.1f}GB" if budget >= 1e9 else f"{max(budget / 1e6, 1):.0f}MB"


def _row_json(row: Row, spec: PolicySpec) -> dict[str, object]:
    """One (trace, policy) row: the policy, the knobs it uses (only those), then the metrics."""
    return {"policy": spec.name, "label": spec.label(), **spec.used(), **row.to_dict()}


def _table(results: list[PolicyResult], title: str, per_trace: bool = True) -> Table:
    """Every (trace, policy) row and the totals; or, not `per_trace`, one row per policy over all
    the traces (the totals alone)."""
    t = Table(title=title, title_justify="left")
    for col, just in (("trace", "left"), ("data", "left"), ("policy", "left"), ("tokens/step", "right"),
                      ("experts/step", "right"), ("GB/token", "right"), ("ms/token", "right"), ("tokens/s", "right"),
                      ("speedup vs ar", "right"), ("of oracle", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    n = len(results[0].rows)
    names = [r.trace for r in results[0].rows] + (["total"] if n > 1 else [])
    if not per_trace:
        names, n = [f"{n} traces"], 0  # index 0 is past the per-trace rows: the totals
    for i, name in enumerate(names):
        for j, res in enumerate(results):
            row = res.rows[i] if i < n else res.total
            kind = row.provenance  # a total over traces of different provenances: mixed
            t.add_row(
                name if j == 0 else "", kind if j == 0 else "", res.spec.label(),
                f"{row.tokens_per_step:.3f}", f"{row.experts_per_step:.1f}",
                f"{row.expert_bytes_per_token / 1e9:.4g}", f"{row.time_per_token_s * 1e3:.4g}", f"{row.tokens_per_s:,.0f}",
                f"{row.speedup_vs_ar:.3f}x" if row.speedup_vs_ar else "-",
                f"{row.oracle_fraction:.3f}" if row.oracle_fraction else "-",
                end_section=j == len(results) - 1,
            )
    return t


@app.command()
@with_options("knobs", lambda: knob_options(registry.knobs()))
@cost_options
def replay(
    traces: Annotated[list[Path], typer.Argument(help="Trace directories, or directories holding traces (searched recursively).")],
    policy: Annotated[list[str] | None, typer.Option(help=f"{', '.join(registry.names())}; repeatable or a comma list; default: all side by side.")] = None,
    knobs: dict[str, Any] | None = None,
    hardware: Hardware = "h200",
    bw: Bw = None,
    peak: Peak = None,
    link_bw: LinkBw = None,
    pcie_bw: PcieBw = None,
    placement: Placement = "hbm",
    devices: Devices = None,
    cost: dict[str, str | None] | None = None,
    engine: Annotated[str, typer.Option(help="fast (vectorised numpy) or des (simpy events: batching, prefetch, per-device timelines).")] = "fast",
    concurrency: Annotated[int | None, typer.Option(min=1, max=1 << 20, help="N clients, each sending its next request when its last one ends, served with continuous batching: the event engine with --arrivals concurrency:N and --max-batch N. Adds per-request tokens/s and inter-token latency, as users report them.")] = None,
    arrivals: Annotated[str, typer.Option(help="des only: sequential, together, poisson:RATE (requests/s), concurrency:N (N clients, closed loop) or a JSON file of arrival seconds.")] = "sequential",
    max_batch: Annotated[int, typer.Option(min=1, help="des only: requests verified together in one step (requests must be active together to share one: with the default sequential arrivals only one is, so it batches nothing).")] = 1,
    prefetch: Annotated[bool, typer.Option(help="des only, offload: copy the next layer's misses while this layer computes.")] = False,
    timeline: Annotated[Path | None, typer.Option(help="des only: write a Chrome/Perfetto trace of the first trace's timeline to FILE.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a timeline already at --timeline (any other file is never replaced).")] = False,
    max_memory: Annotated[str | None, typer.Option(help="Replay in pieces of whole requests within this much memory, e.g. 2GB (fast engine).")] = None,
    stream_share: Annotated[float, typer.Option(min=0.0, help="Without --max-memory, replay a trace in pieces by itself (saying so) when its replay would take more than this share of the memory available (0: never; the pieces fit calibration, predictors and evict's profile per piece).")] = STREAM_SHARE,
    draft_steps: DraftSteps = None,
    per_trace: Annotated[bool, typer.Option("--per-trace", help="With several traces, a row per (trace, policy) and the totals, instead of one row per policy over all the traces.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Also draw each policy's speedup over plain decoding as bars to FILE (.png or .svg; needs matplotlib, in the reports extra).")] = None,
) -> None:
    """Replay selection policies over recorded (or synthetic) traces and compare them.

    Every policy's time is compared with plain decoding (`ar`) and with the oracle bound under the
    same cost model. Each trace is labelled real, hybrid or synthetic in the output. The output
    ends with a verdict (ecosim/verdict.py): the fastest policy and its margin, why speculation
    loses when it does, and the command that asks the question at a paper-scale shape.
    """
    knobs = knobs or {}
    names = [registry.get(p).name for p in listed(policy, "--policy")] or list(registry.names())
    if engine not in ("fast", "des"):
        fail(f"--engine must be fast or des, got {engine!r}")
    if concurrency is not None:
        if arrivals != "sequential" or max_batch != 1:
            fail("--concurrency N sets --arrivals concurrency:N and --max-batch N: give one or the others")
        if engine == "fast" and max_memory:
            fail("--concurrency runs the event engine, which replays whole traces: drop --max-memory")
        engine, arrivals, max_batch = "des", f"concurrency:{concurrency}", concurrency
    if engine == "fast" and (timeline or prefetch or max_batch > 1 or arrivals != "sequential"):
        fail("--timeline, --prefetch, --max-batch and --arrivals need --engine des")
    check_plot(plot)
    if timeline is not None:  # before the replay, not after it: a directory, a missing folder, another file
        check_output(timeline, TIMELINE, force=force, flag="--timeline")
        if not timeline.parent.is_dir():
            fail(f"--timeline {timeline}: no folder {timeline.parent} to write it in")
    if engine == "des" and max_batch > 1 and arrivals == "sequential":
        typer.echo(f"note: --max-batch {max_batch} with --arrivals sequential: each request arrives when the previous one "
                   "finishes, so one is active at a time and nothing is batched (the batch-1 answer); --arrivals together "
                   "or poisson:RATE lets requests share a forward", err=True)
    specs = list(dict.fromkeys(PolicySpec(n, **knobs) for n in names))  # `--lambda auto` makes ecospec ecospec-auto
    device = HardwareArgs(hardware, bw, peak, link_bw, pcie_bw).device()
    place = parse_placement(placement_text(placement, devices))
    config = cost_config(cost)
    knob_used = {k.name: k for s in specs for k in s.policy.knobs}
    for k in knob_used.values():
        if k.resolve:
            k.resolve(knobs[k.name])  # fail early (an unknown predictor), before any work
    paths = find_traces([str(p) for p in traces])
    if max_memory:
        if engine == "des":
            fail("--max-memory replays with the fast engine only")
        budget_bytes = parse_quantity(max_memory, "bytes")
        replays: list[Engine] = [StreamedReplay(p, budget_bytes, draft_steps) for p in paths]
        for r in replays:
            r.trace  # a depth beyond the recorded one fails here, before any work
    elif engine == "des":
        replays = [DesReplay(TraceReplay(at_steps(read_trace(p, gates=False), draft_steps)),
                             DesConfig(arrivals, max_batch, prefetch, timeline=timeline is not None)) for p in paths]
    else:
        replays = []
        for p in paths:
            plan = stream_plan(Path(p))  # footers and positions only: a broken file is left to the whole read's gate
            if plan is not None and stream_share > 0 and plan[1] > stream_share:  # would most likely not fit at all
                streamed = StreamedReplay(Path(p), plan[0], draft_steps)
                streamed.trace  # a depth beyond the recorded one fails here, before any work
                typer.echo(f"note: {Path(p).name}'s replay would take {plan[1]:.0%} of the memory available (over "
                           f"--stream-share {stream_share:g}): replayed in pieces of whole requests within "
                           f"--max-memory {_size(plan[0])}; calibration, predictors trained on the fly and evict's "
                           "profile are fitted per piece", err=True)
                replays.append(streamed)
                continue
            trace = read_trace(p, gates=False)
            if plan is not None:  # said, not switched: a piece fits per-trace tables on fewer requests
                typer.echo(f"note: {Path(p).name} may not fit the {2 * plan[0] / 1e9:.2f} GB of memory available; "
                           f"--max-memory {_size(plan[0])} replays it in pieces of whole requests (exact for policies "
                           "that fit nothing on the whole trace: ar, confidence, ecospec with a predictor file or "
                           "oracle, the bound)", err=True)
            replays.append(TraceReplay(at_steps(trace, draft_steps)))

    knob_hints(knobs, specs, [r.trace.manifest for r in replays])  # legal but useless values: one warning each
    work = len(replays) * (len(specs) + 2)
    with Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("replaying", total=work)
        results = compare(replays, specs, device, place, config, progress=lambda: bar.advance(task))
    if plot:
        plot_replay(plot, [r.spec.label() for r in results], [r.total.speedup_vs_ar or 0.0 for r in results],
                    f"replay over {len(replays)} trace{'s' * (len(replays) != 1)}: speedup over plain decoding")
    run = [s for s in specs if not s.policy.is_bound]
    if timeline and replays and run:  # the first trace's timeline of the last policy that is not a bound
        events = replays[0].events[run[-1]]  # type: ignore[attr-defined]
        timeline.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    serving: dict[str, dict[str, object]] = {}
    for r in replays:
        for spec, metrics in getattr(r, "serving", {}).items():  # the des engine's serving metrics
            serving[f"{r.trace.name}/{spec.label()}"] = metrics
    costs = [cost_model(r.trace, device, place, config) for r in replays]
    used = {k: v for k, v in costs[0].applied().items() if k != "draft_time_s"}
    draft = {r.trace.name: float(c.applied()["draft_time_s"]) for r, c in zip(replays, costs)}  # type: ignore[arg-type]
    said = verdict(results, costs, [r.trace.model.name for r in replays])
    if as_json:
        hw = {k: v for k, v in device.to_dict().items() if v is not None}  # profile-only fields: in `used` instead
        out = {
            "hardware": hw, "placement": str(place), "cost_mode": config.mode, "engine": engine,
            "draft_steps": {r.trace.name: int(c.tree_depth) for r, c in zip(replays, costs)},
            "used": {**used, "draft_time_s": draft, "draft": costs[0].describe()["draft"]},
            "not_modelled": list(NOT_MODELLED),
            "rows": [], "totals": [_row_json(r.total, r.spec) for r in results],
            "verdict": said.to_dict(),
        }
        for i in range(len(replays)):  # one row per (trace, policy), trace by trace
            for r in results:
                row = r.rows[i]
                d = {**_row_json(row, r.spec), "draft_time_s": step_draft_time(r.spec, costs[i])}
                if f"{row.trace}/{r.spec.label()}" in serving:
                    d["serving"] = serving[f"{row.trace}/{r.spec.label()}"]
                out["rows"].append(d)
        print(json.dumps(out, indent=1))
        return
    console = wide_console()
    resolved = "".join(f"; {'/'.join(s.name for s in specs if s.policy.knob(k.name))} {k.key}: {knobs[k.name]}"
                       for k in knob_used.values() if k.resolve)  # the knobs naming something loaded: the predictor
    steps = f", draft steps {draft_steps}" if draft_steps is not None else ""
    title = f"{device.name}, {device.hbm_bw / 1e12:.4g} TB/s, {place}, cost {config.mode}, engine {engine}{steps}{resolved}"
    per = per_trace or len(replays) == 1
    if not per:
        title += f"; totals over {len(replays)} traces (--per-trace: each trace)"
    console.print(_table(results, title, per))
    console.print(used_text(used, draft), markup=False, highlight=False)
    for key, metrics in serving.items():
        console.print(serving_text(key, metrics), markup=False, highlight=False)
    console.print(f"[dim]not modelled: {'; '.join(NOT_MODELLED)}[/dim]")
    for note in provenance_notes(r.provenance for r in results[0].rows):
        console.print(f"[yellow]{note}[/yellow]")
    sampled = decoding_note(paths)
    if sampled:
        console.print(sampled, markup=False, highlight=False)
    if place.stateful:
        console.print("[dim]the oracle under offload prices every expert as a cache hit (a looser lower bound)[/dim]")
    for i, line in enumerate(said.lines):
        console.print(line, markup=False, highlight=False, style="bold" if i == 0 else None)


def decoding_note(paths: list[Path]) -> str:
    """One line naming the traces sampled at T > 0 (trace format version 3), or "" where all are greedy: their
    acceptance is that of sampling at T, and they replay under target-only verification (ecosim/sampling.py)."""
    by: dict[str, list[str]] = {}
    for p in paths:
        d = json.loads((p / MANIFEST).read_text()).get("decoding") or {}
        if d.get("mode") == "sample":
            by.setdefault(f"sampled at T={d.get('temperature'):g} ({d.get('verify')} verification)", []).append(p.name)
    if not by:
        return ""
    n = len(paths) - sum(len(v) for v in by.values())
    return "decoding: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in by.items()) + (f"; greedy: {n} traces" if n else "")


def serving_text(key: str, s: dict[str, object]) -> str:
    """One line of the des engine's serving metrics (ecosim/metrics.py defines them)."""
    itl = s["inter_token_latency_s"]
    ftl = s["first_step_latency_s"]
    per = s["request_tokens_per_s"]
    return (f"serving {key}: {s['throughput_tokens_per_s']:.4g} tokens/s, {s['throughput_requests_per_s']:.4g} requests/s, "
            f"{s['forwards']} forwards; per request p50/p10/p1 {per['p50']:.4g}/{per['p10']:.4g}/{per['p1']:.4g} tokens/s; "  # type: ignore[index]
            f"inter-token latency p50/p90/p99 {itl['p50'] * 1e3:.4g}/{itl['p90'] * 1e3:.4g}/"  # type: ignore[index]
            f"{itl['p99'] * 1e3:.4g} ms; first decode step p50/p90/p99 {ftl['p50'] * 1e3:.4g}/{ftl['p90'] * 1e3:.4g}/"  # type: ignore[index]
            f"{ftl['p99'] * 1e3:.4g} ms; TTFT {s['ttft_s']}")  # type: ignore[index]
