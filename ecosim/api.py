"""The Python API: `ecosim.replay` and `ecosim.sweep`, returning polars DataFrames.

    import ecosim
    df = ecosim.replay("traces/", policy=["confidence", "ecospec"], hardware="h200", placement="hbm",
                       budget=16, lam=0.5, predictor="oracle")
    df.select("trace", "label", "time_per_token_s", "speedup_vs_ar")   # .to_pandas() with pandas installed

`replay` is `ecosim replay --json` as a table: one row per (policy, trace), plus a `total` row per
policy over several traces, each compared with `ar` and the oracle bound under the same cost model.
`sweep` is `ecosim sweep`: the rows of results.parquet (every configuration of the grid on every
trace), in a directory you give (resumable) or a temporary one. Knobs are keywords named as in
`PolicySpec` (budget, lam, predictor, score, and whatever a registered policy adds).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.errors import EcoSimError
from ecosim.metrics import Row
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec, registry
from ecosim.replay import TraceReplay
from ecosim.simulate import compare
from ecosim.sweep import grid as g
from ecosim.sweep.results import DERIVED_SCHEMA, DTYPES, RAW_SCHEMA
from ecosim.sweep.runner import run_sweep
from ecosim.trace.io import Trace, find_traces, read_trace

Paths = str | Path | Trace | Iterable[str | Path | Trace]


def _traces(traces: Paths) -> list[Trace]:
    items = [traces] if isinstance(traces, (str, Path, Trace)) else list(traces)
    out = [t for t in items if isinstance(t, Trace)]
    paths = [str(t) for t in items if not isinstance(t, Trace)]
    return out + [read_trace(p) for p in (find_traces(paths) if paths else [])]


def _specs(policy: str | PolicySpec | Sequence[str | PolicySpec] | None, knobs: dict[str, Any]) -> list[PolicySpec]:
    items = list(registry.names()) if policy is None else [policy] if isinstance(policy, (str, PolicySpec)) else list(policy)
    return [p if isinstance(p, PolicySpec) else PolicySpec(p, **knobs) for p in items]


def _record(spec: PolicySpec, row: Row) -> dict[str, Any]:
    return {**spec.columns(), "label": spec.label(full=True), **row.to_dict()}


def _schema() -> dict[str, pl.DataType]:
    return {"policy": pl.String(), **{k.key: DTYPES[k.type] for k in registry.knobs()}, "label": pl.String(),
            **RAW_SCHEMA, **DERIVED_SCHEMA}


def replay(traces: Paths, policy: str | PolicySpec | Sequence[str | PolicySpec] | None = None, hardware: str = "h200",
           placement: str = "hbm", *, bw: float | None = None, cost: CostConfig | None = None, **knobs: Any) -> pl.DataFrame:
    """Replay policies over traces (paths, folders searched for traces, or `Trace` objects).

    `policy`: a name, a PolicySpec, a list of them, or None for every registered policy; `knobs`
    (budget=, lam=, predictor=, score=, ...) set the knobs of the policies given by name.
    `hardware`: a catalogue name or a profile file; `bw` overrides its HBM bandwidth (bytes/s).
    Columns: policy, each knob, label, then `metrics.Row.to_dict()`'s fields.
    """
    found = _traces(traces)
    if not found:
        raise EcoSimError(f"no traces in {traces!r}")
    specs = _specs(policy, knobs)
    device = get_device(hardware).replace(hbm_bw=bw)
    results = compare([TraceReplay(t) for t in found], specs, device, parse_placement(placement), cost or CostConfig())
    rows = [_record(r.spec, row) for r in results for row in r.rows]
    if len(found) > 1:
        rows += [_record(r.spec, r.total) | {"trace": "total"} for r in results]
    return pl.DataFrame(rows, schema=_schema())


def _axis(name: str, values: Any) -> list[Any]:
    """A sweep axis given as a value, a list, or the CLI's text (`0:2:0.05`, `8,16`)."""
    if isinstance(values, str):
        return g.parse_axis(name, values)
    items = list(values) if isinstance(values, (list, tuple, range)) else [values]
    return g.parse_axis(name, ",".join(repr(v) if isinstance(v, float) else str(v) for v in items))


def sweep(traces: str | Path | Iterable[str | Path], policy: str | Sequence[str] | None = None,
          hardware: str | Sequence[str] = "h200", placement: str | Sequence[str] = "hbm", *,
          bw: float | Sequence[float] | None = None, cost: CostConfig | None = None, out: str | Path | None = None,
          jobs: int = 1, **knobs: Any) -> pl.DataFrame:
    """Every configuration of the grid on every trace: results.parquet's rows (sweep/results.py).

    `policy`: names (default: every policy that selects; the baseline and the bound always run).
    Each knob is a value, a list or the CLI's text (`lam="0:2:0.05"`); knobs not given take their
    defaults. `out` keeps the sweep directory (a rerun resumes it); without it a temporary one is
    used and removed. `jobs` worker processes (1: in this process).
    """
    paths = [str(traces)] if isinstance(traces, (str, Path)) else [str(t) for t in traces]
    names = registry.runnable() if policy is None else [policy] if isinstance(policy, str) else policy
    policies = g.parse_policies(",".join(names))
    used = {k.name: k for p in policies for k in registry.get(p).knobs}
    unknown = set(knobs) - {k.name for k in registry.knobs()}
    if unknown:
        raise EcoSimError(f"unknown knob(s) {', '.join(sorted(unknown))}")
    grid = g.Grid(
        policies=policies,
        knobs={n: _axis(k.key, knobs.get(n, k.default)) for n, k in used.items()},
        hardware=[hardware] if isinstance(hardware, str) else list(hardware),
        bandwidths=[None] if bw is None else [float(b) for b in (bw if isinstance(bw, Sequence) else [bw])],
        placements=g.parse_placements(placement if isinstance(placement, str) else ",".join(placement)),
        settings=g.Settings(cost or CostConfig()),
    )
    if out is not None:
        return run_sweep(grid, paths, Path(out), jobs=jobs).results
    with tempfile.TemporaryDirectory(prefix="ecosim-sweep-") as tmp:
        return run_sweep(grid, paths, Path(tmp), jobs=jobs).results
