"""`ecosim sweep`, `ecosim winner`, `ecosim pareto`: grids of configurations, their best, their front."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ecosim.cli import app, command_line, fail, interrupted, joined, wide_console
from ecosim.cli.adapter import knob_options, with_options
from ecosim.cli.hints import axis_hints
from ecosim.outputs import SWEEP, check_output
from ecosim.cli.options import (
    DEVICE_NAMES, PLACEMENT_HELP, LinkBw, PcieBw, Peak, cost_config, cost_options, used_lines, used_terms,
)
from ecosim.plots import check_plot, plot_sweep
from ecosim.policies import PolicySpec, registry
from ecosim.policies.base import DRAFTING_RULE
from ecosim.trace.read import find_traces, read_manifest
from ecosim.trace.schema import provenance_notes

Policies = Annotated[list[str], typer.Option("--policy", help=f"{', '.join(registry.names())}, repeatable or a comma list; "
                                       f"{' and '.join(registry.references())} rows are always computed (the ratios need them).")]
HardwareList = Annotated[list[str], typer.Option("--hardware", help=f"Catalogue devices ({DEVICE_NAMES}) or profile .json files; repeatable or a comma list.")]
BwList = Annotated[list[str] | None, typer.Option("--bw", help="HBM bandwidths overriding the device's, repeatable or a comma list, e.g. 2TB/s,3.3TB/s,4.8TB/s.")]
PlacementList = Annotated[list[str], typer.Option("--placement", help=f"{PLACEMENT_HELP} Repeatable or a comma list.")]
Objective = Annotated[str, typer.Option(help="What the winner optimises over the total of the traces: time_per_token (smallest) or speedup_vs_ar (largest).")]
MinTps = Annotated[float | None, typer.Option("--min-tokens-per-step", min=1.0, max=32767.0, help="Winner constraint: total tokens / total steps at least this.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
StepsList = Annotated[list[str] | None, typer.Option("--draft-steps", help="The settings' draft steps N and/or "
                                              "inclusive ranges start:stop:step, and `recorded` (each trace's own depth, "
                                              "the default): each trace is replayed cut to depth N (at most its recorded "
                                              "depth); repeatable or a comma list. " + DRAFTING_RULE)]


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.4g}"


def _knobs(r: dict[str, Any]) -> str:
    """A results row's configuration, every knob shown: `ecospec b=16 λ=0.5 oracle difference`, and
    its draft steps where the sweep set them (`S=3`)."""
    steps = f" S={r['draft_steps']}" if r.get("draft_steps") is not None else ""
    return PolicySpec.from_columns(r, "results", required=False).label(full=True) + steps


def _pricing(r: dict[str, Any]) -> str:
    return f"{r['hardware']} {r['hbm_bw'] / 1e12:.4g} TB/s {r['placement']}"


def _winner_table(doc: dict[str, Any]) -> Table:
    t = Table(title=f"winners ({doc['objective']}"
                    + (f", tokens/step >= {doc['constraints']['min_tokens_per_step']:g}" if doc["constraints"]["min_tokens_per_step"] is not None else "")
                    + f", over {len(doc['traces'])} traces)", title_justify="left")
    for col in ("pricing", "configuration", "tokens/step", "experts/step", "PCIe GB/token", "ms/token", "tokens/s",
                "speedup vs ar", "of oracle", "candidates"):
        t.add_column(col, justify="left" if col in ("pricing", "configuration") else "right")
    for w in doc["winners"]:
        p = w["predicted"]
        if p is None:
            t.add_row(_pricing(w), "(none meets the constraint)", "-", "-", "-", "-", "-", "-", "-", str(w["candidates"]))
            continue
        t.add_row(_pricing(w), _knobs(w["config"]), f"{p['tokens_per_step']:.3f}", f"{p['experts_per_step']:.1f}",
                  f"{p['pcie_bytes_per_token'] / 1e9:.4g}", _ms(p["time_per_token_s"]), f"{p['tokens_per_s']:,.0f}",
                  f"{p['speedup_vs_ar']:.3f}x", f"{p['oracle_fraction']:.3f}", str(w["candidates"]))
    return t


@app.command()
@with_options("knobs", lambda: knob_options(registry.knobs(), axis=True))
@cost_options
def sweep(
    traces: Annotated[list[Path], typer.Argument(help="Trace directories, or directories holding traces (searched recursively).")],
    out: Annotated[Path, typer.Option("--out", help="Sweep directory: parts/, results.parquet, winner.json; rerun into it to resume.")],
    policy: Policies = ["ar", "confidence", "ecospec"],
    knobs: dict[str, list[str]] | None = None,
    hardware: HardwareList = ["h200"],
    bw: BwList = None,
    placement: PlacementList = ["hbm"],
    draft_steps: StepsList = None,
    peak: Peak = None,
    link_bw: LinkBw = None,
    pcie_bw: PcieBw = None,
    cost: dict[str, str | None] | None = None,
    executor: Annotated[str, typer.Option(help="local (a process pool) or ray (a Ray cluster; local Ray without --ray-address).")] = "local",
    jobs: Annotated[int | None, typer.Option(min=1, help="Worker processes (local) or CPUs of a local Ray; default: the CPUs available. 1 runs in this process.")] = None,
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster to join (ray.init(address=...)), e.g. ray://head:10001 or auto.")] = None,
    objective: Objective = "time_per_token",
    min_tokens_per_step: MinTps = None,
    as_json: AsJson = False,
    plot: Annotated[Path | None, typer.Option(help="Also draw time per token against tokens per step of every configuration, with the front, to FILE (.png or .svg; needs matplotlib, in the reports extra).")] = None,
) -> None:
    """Replay the Cartesian product of the given axes over traces into DIR/results.parquet.

    One row per configuration and trace, with the fields of `replay --json` rows plus the
    configuration. Finished tasks are committed to DIR/parts/ as they end, so rerunning the same
    sweep resumes it. DIR/winner.json holds the best configuration per hardware, bandwidth and
    placement.
    """
    from ecosim.sweep import grid as g
    from ecosim.sweep.executors import default_jobs, import_ray
    from ecosim.sweep.runner import run_sweep
    from ecosim.sweep.winner import OBJECTIVES

    if objective not in OBJECTIVES:
        fail(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    check_output(out, SWEEP)  # a sweep directory is resumed; anything else is never written into
    check_plot(plot)
    if executor not in ("local", "ray"):
        fail(f"--executor must be local or ray, got {executor!r}")
    if executor == "ray":
        import_ray()  # one line saying how to install it, exit 2
    policies = g.parse_policies(joined(policy) or "")
    used = {k.name: k for p in policies for k in registry.get(p).knobs}  # an axis no policy uses is not read
    grid = g.Grid(
        policies=policies,
        knobs={name: g.parse_axis(k, joined((knobs or {})[name]) or "") for name, k in used.items()},
        hardware=g.parse_hardware(joined(hardware) or ""),
        bandwidths=g.parse_bandwidths(joined(bw)),
        placements=g.parse_placements(joined(placement) or ""),
        settings=g.Settings(cost_config(cost),
                            peak, link_bw, pcie_bw),
        draft_steps=g.parse_steps(joined(draft_steps)),
    )
    for p in grid.pricings():
        grid.settings.device(p)  # unknown hardware or a bad override: one line, before any work
    axis_hints(knobs or {}, grid.knobs, policies, [read_manifest(p) for p in find_traces([str(t) for t in traces])])
    used = used_terms(grid.settings, grid.pricings())
    count = {"done": 0, "total": 0, "before": 0}  # (configuration, trace) runs, as the summary counts rows

    def done(n: int) -> None:
        count["done"] += n
        bar.advance(task, n)

    with _progress() as bar:
        task = bar.add_task("planning", total=None)

        def plan(total: int, skipped: int) -> None:
            count.update(done=skipped, total=total, before=skipped)
            bar.update(task, description=f"sweep ({skipped} done before)", total=total, completed=skipped)

        try:
            outcome = run_sweep(grid, [str(p) for p in traces], out, executor, jobs or default_jobs(), ray_address,
                                objective, min_tokens_per_step, on_plan=plan, on_done=done)
        except KeyboardInterrupt:
            interrupted("ecosim", _interrupted_text(count, out))
    d = outcome.dir
    if plot:
        from ecosim.sweep.winner import totals

        groups = totals(outcome.results, [t["path"] for t in outcome.winner["traces"]])
        plot_sweep(plot, [g for g in groups if g["policy"] != registry.bound().name], _pricing)
    n_traces = len(outcome.winner["traces"])
    n_configs = len(outcome.configs) // n_traces  # outcome.configs holds one entry per (configuration, trace)
    summary = {
        "dir": str(d), "results": str(d / "results.parquet"), "winner_file": str(d / "winner.json"),
        "configurations": n_configs, "traces": n_traces, "rows": outcome.results.height, "tasks_run": outcome.tasks,
        "computed": outcome.computed, "skipped": outcome.skipped, "impossible": outcome.impossible,
        "impossible_reasons": outcome.impossible_reasons, "used": used, "winner": outcome.winner,
    }
    if as_json:
        print(json.dumps(summary, indent=1))
        return
    console = wide_console()
    console.print(f"{d}: {n_configs} configurations x {n_traces} trace{'s' * (n_traces != 1)} = {len(outcome.configs)} rows ({outcome.computed} "
                  f"computed, {outcome.skipped} already done) -> results.parquet, winner.json")
    console.print(_winner_table(outcome.winner))
    for line in used_lines(used, grid.settings.cost):
        console.print(line, markup=False, highlight=False)
    if outcome.impossible:
        console.print(f"[yellow]{outcome.impossible} configurations skipped, their placement does not fit the device: "
                      f"{'; '.join(outcome.impossible_reasons or [])}[/yellow]")
    _notes(console, outcome.winner["traces"])


def _interrupted_text(count: dict[str, int], out: Path) -> str:
    """Ctrl-C's one line: configurations done of total (a configuration on one trace is one, as the
    summary's rows), where they are, and the command that resumes."""
    if not count["total"]:
        return f"interrupted while planning, nothing committed; run again with: {command_line()}"
    before = f", {count['before']} of them before this run" if count["before"] else ""
    return (f"interrupted; {count['done']} of {count['total']} configurations done (one per configuration and trace{before}), "
            f"committed to {out}/parts; resume with: {command_line()}")


def _notes(console: Console, traces: list[dict[str, Any]]) -> None:
    """The warnings for the sweep's hybrid and synthetic traces (winner.json's `traces`)."""
    for note in provenance_notes(t["provenance"] for t in traces):
        console.print(f"[yellow]{note}[/yellow]")


@app.command()
def winner(
    sweep_dir: Annotated[Path, typer.Argument(help="A sweep directory (ecosim sweep --out DIR).")],
    objective: Objective = "time_per_token",
    min_tokens_per_step: MinTps = None,
    as_json: AsJson = False,
) -> None:
    """Pick the winner of a finished sweep again (another objective or constraint); rewrites DIR/winner.json."""
    from ecosim.sweep.results import SweepDir, atomic_write_text
    from ecosim.sweep.runner import WINNER
    from ecosim.sweep.winner import choose

    d = SweepDir(sweep_dir)
    meta = d.read_meta()
    doc = choose(d.read_results(meta), meta, objective, min_tokens_per_step)
    atomic_write_text(json.dumps(doc, indent=1) + "\n", d.path / WINNER)
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    console = wide_console()
    console.print(_winner_table(doc))
    _notes(console, doc["traces"])


@app.command()
def pareto(
    sweep_dir: Annotated[Path, typer.Argument(help="A sweep directory (ecosim sweep --out DIR).")],
    as_json: AsJson = False,
) -> None:
    """The configurations on the front of time per token against experts loaded per step, per pricing."""
    from ecosim.sweep.pareto import front
    from ecosim.sweep.results import SweepDir, kind_of

    d = SweepDir(sweep_dir)
    meta = d.read_meta()
    rows = front(d.read_results(meta), [t["path"] for t in meta["traces"]])
    traces = [{**t, "provenance": kind_of(t)} for t in meta["traces"]]  # a sweep.json older than provenance
    if as_json:
        print(json.dumps({"dir": str(d.path), "traces": traces, "front": rows}, indent=1))
        return
    t = Table(title=f"Pareto front: time per token vs experts per step (totals over {len(meta['traces'])} traces)",
              title_justify="left")
    for col in ("pricing", "configuration", "experts/step", "ms/token", "tokens/step", "speedup vs ar", "of oracle"):
        t.add_column(col, justify="left" if col in ("pricing", "configuration") else "right")
    last = None
    for r in rows:
        p = _pricing(r)
        t.add_row(p if p != last else "", _knobs(r), f"{r['experts_per_step']:.1f}", _ms(r["time_per_token_s"]),
                  f"{r['tokens_per_step']:.3f}", f"{r['speedup_vs_ar']:.3f}x", f"{r['oracle_fraction']:.3f}")
        last = p
    console = wide_console()
    console.print(t)
    _notes(console, traces)
