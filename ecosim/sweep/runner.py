"""Run a sweep into a directory: plan, skip what is done, run the rest, consolidate, pick the winner."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ecosim.catalog.models import ModelShape
from ecosim.cost import CostModel
from ecosim.errors import EcoSimError
from ecosim.placements import parse_placement
from ecosim.replay import no_positions
from ecosim.sweep.executors import check_executor, run_tasks
from ecosim.sweep.grid import Config, Grid, TraceRef, group_tasks
from ecosim.sweep.results import SweepDir, atomic_write_text, config_record, trace_fingerprint
from ecosim.sweep.tasks import batch_tasks
from ecosim.sweep.winner import choose, versions
from ecosim.trace.io import find_traces, provenance_of
from ecosim.trace.read import read_manifest, read_positions

WINNER = "winner.json"
# Test hook (tests/test_sweep.py, tests/test_faults.py): "N" sends this process SIGKILL right after
# it commits its N-th part, a point that does not depend on the machine's speed; "N:SIGINT" sends
# SIGINT instead (a user's Ctrl-C). Unset in normal use.
KILL_AFTER_PART = "ECOSIM_TEST_KILL_AFTER_PART"


@dataclass
class Outcome:
    dir: Path
    configs: list[Config]
    tasks: int  # units of work run (a task, or a batch of ecospec tasks sharing one greedy run)
    computed: int  # configurations run now
    skipped: int  # configurations found done in parts/
    results: pl.DataFrame
    winner: dict[str, Any]
    impossible: int = 0  # configurations left out: the placement does not fit the device
    impossible_reasons: list[str] | None = None  # one message per (trace, pricing) left out


def trace_refs(paths: list[str | Path]) -> list[tuple[TraceRef, dict[str, Any]]]:
    """Resolved path, fingerprint and manifest of each trace (duplicates dropped); manifests checked."""
    out: dict[str, tuple[TraceRef, dict[str, Any]]] = {}
    for p in find_traces(paths):
        p = p.resolve()
        if str(p) in out:
            continue
        manifest = read_manifest(p)  # the gate: declared keys, types and ranges
        if not sum(int(r["positions"]) for r in manifest["requests"]):
            raise EcoSimError(no_positions(p))
        out[str(p)] = (TraceRef(str(p), trace_fingerprint(p)), manifest)
    return list(out.values())


def run_sweep(
    grid: Grid,
    traces: list[str | Path],
    out: Path,
    executor: str = "local",
    jobs: int = 1,
    ray_address: str | None = None,
    objective: str = "time_per_token",
    min_tokens_per_step: float | None = None,
    on_plan: Callable[[int, int], None] | None = None,
    on_done: Callable[[int], None] | None = None,
) -> Outcome:
    """The sweep of `grid` over `traces` into `out`, resuming whatever parts/ already holds.

    `on_plan(total, skipped)` is called once the plan is known, `on_done(n)` as each task's n
    configurations are committed.
    """
    check_executor(executor, ray_address)  # before anything is written: a cluster that does not answer is one line
    d = SweepDir(out)
    refs = trace_refs(traces)
    for ref, manifest in refs:  # a setting cannot draft deeper than a trace recorded
        depth = int(manifest["tree"].get("depth", 0))
        deeper = [n for n in grid.draft_steps if n is not None and n > depth]
        if deeper:
            raise EcoSimError(f"--draft-steps {deeper[0]}: trace {Path(ref.path).name} records trees of depth {depth}; "
                              "a setting cannot draft deeper than was recorded (record deeper trees)")
    pricings = grid.pricings()
    reasons = unfit(grid, refs)
    configs = [c for c in grid.configs([r for r, _ in refs]) if (c.trace, c.pricing) not in reasons]
    if not configs:
        raise EcoSimError(f"no configuration of the sweep fits its hardware: {next(iter(reasons.values()))}")
    meta = {
        "grid": grid.describe(),
        "traces": [{"path": r.path, "name": Path(r.path).name, "fingerprint": r.fingerprint,
                    "provenance": provenance_of(m), "synthetic": bool(m.get("synthetic"))} for r, m in refs],
        "pricings": [{"hardware": p.hardware, "hbm_bw": grid.settings.device(p).hbm_bw, "placement": p.placement,
                      "device": grid.settings.device(p).to_dict()} for p in pricings],
        "configurations": len(configs),
        "versions": versions(),
    }
    d.create()
    d.write_meta(meta)
    done = d.done()
    todo = [c for c in configs if c.id not in done]
    tasks = batch_tasks(group_tasks(todo, grid.settings))
    if on_plan:
        on_plan(len(configs), len(configs) - len(todo))
    by_id = {c.id: c for c in todo}
    bw = {p: grid.settings.device(p).hbm_bw for p in pricings}
    for n, (task, rows) in enumerate(run_tasks(tasks, executor, jobs, ray_address), 1):
        records = [{**config_record(by_id[cid], bw[by_id[cid].pricing]), **raw} for cid, raw in rows]
        d.write_part(records)
        if on_done:
            on_done(len(records))
        when, _, sig = os.environ.get(KILL_AFTER_PART, "").partition(":")
        if when == str(n):
            os.kill(os.getpid(), getattr(signal, sig or "SIGKILL"))
    results = d.consolidate(configs)
    winner = choose(results, meta, objective, min_tokens_per_step)
    atomic_write_text(json.dumps(winner, indent=1) + "\n", d.path / WINNER)
    skipped_out = len(grid.configs([r for r, _ in refs])) - len(configs)
    return Outcome(d.path, configs, len(tasks), len(todo), len(configs) - len(todo), results, winner,
                   skipped_out, sorted(set(reasons.values())))


def unfit(grid: Grid, refs: list[tuple[TraceRef, dict[str, Any]]]) -> dict[tuple[TraceRef, Any], str]:
    """(trace, pricing) pairs whose placement does not fit the device (weights + the KV of the
    trace's longest context), with the one-line reason the capacity check gives."""
    out: dict[tuple[TraceRef, Any], str] = {}
    for ref, manifest in refs:
        shape = ModelShape.from_manifest(manifest["model"])
        pos = read_positions(ref.path)  # checked against the manifest: a damaged file is one line, not a polars error
        context = int((pos["context_len"].astype("int64") + pos["n_nodes"]).max(initial=0))
        for p in grid.pricings():
            try:
                CostModel(shape, grid.settings.device(p), parse_placement(p.placement), grid.settings.cost).check(context)
            except EcoSimError as e:
                out[(ref, p)] = f"{Path(ref.path).name} {p.placement}: {e}"
    return out
