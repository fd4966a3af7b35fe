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

What the report notebooks need besides: `devices()` (the hardware catalogue), `model_shape(name)`,
`placement_of(text)` (a placement's type: devices, groups, stateful), `step_times(...)` (the cost
model's seconds for given expert counts, without a trace), `unions(...)` (the experts a policy's
tree would read at every position of a trace), `compare_predictors(...)` with
`predictor_tables(doc)` (`ecosim predictor compare --json` and its Markdown tables), and
`paper_readings(...)` (the paper's speedup read two ways, as `replay`'s verdict gives it).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ecosim.analysis import predictor_compare as pc
from ecosim.catalog.devices import DEVICES, Device, get_device
from ecosim.catalog.dtypes import BITS
from ecosim.catalog.hosts import Host, load_host
from ecosim.catalog.hosts import shipped as shipped_hosts
from ecosim.catalog.models import ModelShape, get_model, shape_of
from ecosim.catalog.serving import load_serving
from ecosim.cost import CostConfig, CostModel
from ecosim import fidelity as _fidelity
from ecosim.errors import EcoSimError
from ecosim.hybrid import write_hybrid
from ecosim.metrics import Row
from ecosim.placements import Placement, parse_placement
from ecosim.policies import PolicySpec, registry
from ecosim.readings import POLICIES as READ_POLICIES, readings
from ecosim.replay import TraceReplay
from ecosim.routing import stats as routing_statistics
from ecosim.routing.data import Routing, trace_continuation
from ecosim.routing.scale import RoutingShape
from ecosim.routing.scale import scale_distinct as _scale_distinct
from ecosim.simulate import at_steps, compare
from ecosim.sweep import grid as g
from ecosim.sweep.results import DERIVED_SCHEMA, DTYPES, RAW_SCHEMA
from ecosim.sweep.runner import run_sweep
from ecosim.synth import SynthConfig, calibrated, write_synthetic
from ecosim.trace.io import Trace, find_traces, read_trace
from ecosim.units import parse_quantity

Paths = str | Path | Trace | Iterable[str | Path | Trace]


def _traces(traces: Paths) -> list[Trace]:
    items = [traces] if isinstance(traces, (str, Path, Trace)) else list(traces)
    out = [t for t in items if isinstance(t, Trace)]
    paths = [str(t) for t in items if not isinstance(t, Trace)]
    return out + [read_trace(p, gates=False) for p in (find_traces(paths) if paths else [])]  # no replay reads gates


def _specs(policy: str | PolicySpec | Sequence[str | PolicySpec] | None, knobs: dict[str, Any]) -> list[PolicySpec]:
    items = list(registry.names()) if policy is None else [policy] if isinstance(policy, (str, PolicySpec)) else list(policy)
    return [p if isinstance(p, PolicySpec) else PolicySpec(p, **knobs) for p in items]


def _record(spec: PolicySpec, row: Row) -> dict[str, Any]:
    return {**spec.columns(), "label": spec.label(full=True), **row.to_dict()}


def _schema() -> dict[str, pl.DataType]:
    return {"policy": pl.String(), **{k.key: DTYPES[k.type] for k in registry.knobs()}, "label": pl.String(),
            **RAW_SCHEMA, **DERIVED_SCHEMA}


def replay(traces: Paths, policy: str | PolicySpec | Sequence[str | PolicySpec] | None = None, hardware: str = "h200",
           placement: str = "hbm", *, bw: float | str | None = None, cost: CostConfig | None = None,
           host: str | Host | None = None, dtype: str | None = None, total: bool | None = None,
           draft_steps: int | None = None, **knobs: Any) -> pl.DataFrame:
    """Replay policies over traces (paths, folders searched for traces, or `Trace` objects).

    `policy`: a name, a PolicySpec, a list of them, or None for every registered policy; `knobs`
    (budget=, lam=, predictor=, score=, ...) set the knobs of the policies given by name.
    `hardware`: a catalogue name or a profile file; `bw` overrides its HBM bandwidth (bytes/s, or
    the CLI's text: "1TB/s"). `total`: the pooled row per policy over all traces (trace "total":
    totals of tokens, steps, loads and time, not a mean of ratios); None: only with several traces,
    True: always, False: never. `host` (a catalogue host, a host file or a Host) and `dtype` (bf16, fp8, a GGUF
    type such as q4_k_m) are CostConfig's --host and --dtype (placements cpu-moe[:N] and cpu need a host).
    `draft_steps`: the setting's draft steps N (`--draft-steps`): each trace's trees cut to depth N
    before the policies select (`ecosim.trace.truncate`), each step priced for the steps it drafts
    (policies/base.py DRAFTING_RULE); None: the recorded depth.
    Columns: policy, each knob, label, then `metrics.Row.to_dict()`'s fields.
    """
    found = _traces(traces)
    if not found:
        raise EcoSimError(f"no traces in {traces!r}")
    specs = _specs(policy, knobs)
    if isinstance(bw, str):
        bw = parse_quantity(bw, "bandwidth")
    device = get_device(hardware).replace(hbm_bw=bw)
    config = with_host(cost or CostConfig(), host, dtype)
    replays = [TraceReplay(at_steps(t, draft_steps)) if draft_steps else TraceReplay.of(t) for t in found]
    results = compare(replays, specs, device, parse_placement(placement), config)
    rows = [_record(r.spec, row) for r in results for row in r.rows]
    if total or (total is None and len(found) > 1):
        rows += [_record(r.spec, r.total) | {"trace": "total"} for r in results]
    return pl.DataFrame(rows, schema=_schema())


def with_host(cost: CostConfig, host: str | Host | None, dtype: str | None) -> CostConfig:
    """`cost` with --host and --dtype set where given (a host by name or file is loaded, a dtype checked)."""
    if dtype is not None and dtype not in BITS:
        raise EcoSimError(f"dtype {dtype!r} unknown; known: {', '.join(BITS)}")
    h = load_host(host) if isinstance(host, str) else host
    return dataclasses.replace(cost, **{k: v for k, v in (("host", h), ("dtype", dtype)) if v is not None})


def hosts() -> dict[str, Host]:
    """The host catalogue by name (CPU and RAM data sheets with sources, catalog/data/hosts/)."""
    return {name: load_host(name) for name in shipped_hosts()}


def paper_readings(traces: Paths, hardware: str = "h200", placement: str = "tp:8", *,
                   cost: CostConfig | None = None) -> list[dict[str, Any]]:
    """The paper's speedup read two ways on each trace of a paper shape (readings.py): over plain
    decoding (ecospec-auto / ar) and over the default trees (eagle2-default, sglang-default), with the
    paper's figures beside them and the split into speculation itself and cost-awareness; what
    `ecosim replay`'s verdict prints. Traces of other shapes give no reading."""
    found = _traces(traces)
    specs = [PolicySpec(p.name) for p in READ_POLICIES]
    results = compare([TraceReplay(t) for t in found], specs, get_device(hardware), parse_placement(placement),
                      cost or CostConfig())
    return [r.to_dict() for r in readings(results, [t.model.name for t in found])]


def devices() -> dict[str, Device]:
    """The hardware catalogue by name (data sheets with sources, catalog/data/hardware/)."""
    return dict(DEVICES)


def model_shape(name: str) -> ModelShape:
    """A model's shape (layers, experts, top-k, bytes per expert): a catalogue name (catalog/models.py) or a
    Hugging Face MoE config.json or its folder (catalog/hf_config.py)."""
    return get_model(name)


def placement_of(text: str) -> Placement:
    """The placement `text` names (hbm, tp:N, ep:N, tp:N+ep:M, offload:CAP[:lru|lfu]): its
    `devices`, `groups`, and `stateful` (whether a step's cost depends on earlier steps)."""
    return parse_placement(text)


def step_times(model: str | ModelShape, hardware: str | Device, experts: np.ndarray, tokens: np.ndarray,
               context: np.ndarray, *, placement: str = "hbm", cost: CostConfig | None = None,
               host: str | Host | None = None, dtype: str | None = None, speculative: bool = False) -> np.ndarray:
    """Seconds of batch-1 steps priced by the cost model (ecosim/cost/) without a trace: step i verifies
    `tokens[i]` tokens after `context[i]` and reads `experts[i, l]` distinct experts in MoE layer l
    (`experts`: (steps, moe_layers))."""
    shape = shape_of(model)
    device = get_device(hardware) if isinstance(hardware, str) else hardware
    c = CostModel(shape, device, parse_placement(placement), with_host(cost or CostConfig(), host, dtype))
    return c.step_times(np.asarray(experts), np.asarray(tokens), np.asarray(context), speculative)


def unions(traces: Paths, policy: str | PolicySpec | Sequence[str | PolicySpec], **knobs: Any) -> pl.DataFrame:
    """Per trace and policy, means over every position (whether or not a replay visits it) of what
    the policy's tree would verify there: `tokens` (tree size, root included) and
    `experts_per_layer` (distinct experts it reads, also over MoE layers). Columns: trace, policy,
    each knob, label, tokens, experts_per_layer; rows trace by trace, policies in the order given."""
    specs = _specs(policy, knobs)
    rows = []
    for t in _traces(traces):
        r = TraceReplay.of(t)  # one per trace: its trees and pick orders serve every policy
        for spec in specs:
            tokens = float(r.trees.selected_count(r.selection(spec)).mean())
            rows.append({"trace": t.name, **spec.columns(), "label": spec.label(full=True), "tokens": tokens,
                         "experts_per_layer": float(r.unions_everywhere(spec).mean())})
    spec_columns = {k: v for k, v in _schema().items() if k not in RAW_SCHEMA and k not in DERIVED_SCHEMA}
    schema = {"trace": pl.String(), **spec_columns, "tokens": pl.Float64(), "experts_per_layer": pl.Float64()}
    return pl.DataFrame(rows, schema=schema)


def synthetic(model: str | ModelShape, *, preset: bool = True, routing: Routing | None = None, name: str | None = None,
              **knobs: Any) -> Trace:
    """A synthetic trace of a catalogue shape (synth.py), generated in a temporary folder and read
    into memory. `preset`: routed by the shape's calibrated preset (`synth.calibrated`), else by
    SynthConfig's uncalibrated defaults; with `routing` (real routing, `import_routing`) a hybrid
    trace: the real continuation with generated draft trees (hybrid.py). `knobs`: SynthConfig's
    fields (requests, positions, max_nodes, depth, seed, ...); `name`: the trace's (default: the
    model's). An illustration, not a measurement."""
    shape = shape_of(model)
    cfg = calibrated(shape, **knobs) if preset else SynthConfig(**knobs)
    with tempfile.TemporaryDirectory(prefix="ecosim-synth-") as tmp:  # read_trace keeps the trace in memory
        path = Path(tmp) / (name or shape.name)
        written = write_hybrid(path, shape, cfg, routing) if routing is not None else write_synthetic(path, shape, cfg)
        return read_trace(written)


def routing_stats(data: Routing | Trace, *, trees: bool = True, **options: Any) -> dict[str, Any]:
    """`ecosim inspect --routing`'s statistics (routing/stats.py) of real routing (`import_routing`)
    or of a trace's continuation (the tokens it accepted), with its draft trees' sibling and
    parent-child overlap unless `trees=False`. `options`: name, fraction, seed of stats.routing_stats."""
    if isinstance(data, Trace):
        return routing_statistics.routing_stats(trace_continuation(data), data if trees else None, **options)
    return routing_statistics.routing_stats(data, **options)


def scale_distinct(distinct: float, base: str | ModelShape, to: str | ModelShape) -> float:
    """A point of the window curve (distinct experts per layer in n tokens) of model `base` carried
    to model `to`'s shape, keeping its effective tokens (routing/scale.py: how presets are scaled)."""
    shapes = [RoutingShape.of(shape_of(m)) for m in (base, to)]
    return _scale_distinct(distinct, *shapes)


def _axis(name: str, values: Any) -> list[Any]:
    """A sweep axis given as a value, a list, or the CLI's text (`0:2:0.05`, `8,16`)."""
    if isinstance(values, str):
        return g.parse_axis(name, values)
    items = list(values) if isinstance(values, (list, tuple, range)) else [values]
    return g.parse_axis(name, ",".join(repr(v) if isinstance(v, float) else str(v) for v in items))


def _steps_text(steps: int | str | Sequence[int | None] | None) -> str | None:
    """The draft-steps axis as the CLI's text (None in a list: the recorded depth)."""
    if steps is None or isinstance(steps, str):
        return steps
    items = [steps] if isinstance(steps, int) else list(steps)
    return ",".join(g.RECORDED if s is None else str(s) for s in items)


def sweep(traces: str | Path | Iterable[str | Path], policy: str | Sequence[str] | None = None,
          hardware: str | Sequence[str] = "h200", placement: str | Sequence[str] = "hbm", *,
          bw: float | Sequence[float] | None = None, cost: CostConfig | None = None, out: str | Path | None = None,
          jobs: int = 1, draft_steps: int | str | Sequence[int | None] | None = None, **knobs: Any) -> pl.DataFrame:
    """Every configuration of the grid on every trace: results.parquet's rows (sweep/results.py).

    `policy`: names (default: every policy that selects; the baseline and the bound always run).
    Each knob is a value, a list or the CLI's text (`lam="0:2:0.05"`); knobs not given take their
    defaults. `out` keeps the sweep directory (a rerun resumes it); without it a temporary one is
    used and removed. `jobs` worker processes (1: in this process). `draft_steps`: the settings'
    draft steps (a value, a list, the CLI's text `1:4,recorded`; None: each trace's recorded depth),
    an axis like the knobs: each trace is replayed cut to each depth (column `draft_steps`).
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
        draft_steps=g.parse_steps(_steps_text(draft_steps)),
    )
    if out is not None:
        return run_sweep(grid, paths, Path(out), jobs=jobs).results
    with tempfile.TemporaryDirectory(prefix="ecosim-sweep-") as tmp:
        return run_sweep(grid, paths, Path(tmp), jobs=jobs).results


def compare_predictors(traces: Paths, predictors: str | Sequence[str] = pc.PREDICTORS, *, budget: int = 16,
                       lambdas: str | Sequence[float] = "0:0.3:0.025,0.4:2:0.2", hardware: str | Sequence[str] = "h200",
                       placements: str | Sequence[str] = "hbm,offload:8", folds: int = 4, score: str = "difference",
                       cost: CostConfig | None = None, replay: bool = True) -> dict[str, Any]:
    """`ecosim predictor compare --json`'s document: each predictor's recall@k per MoE layer and,
    with `replay`, ecospec at its best lambda against confidence at the same budget per pricing
    (hardware x placements; definitions: analysis/predictor_compare.py). Traces are grouped by
    model and provenance; kinds by name are fitted k-fold by request (`folds`)."""
    names = _axis("predictor", predictors)
    lams = _axis("lambda", lambdas)
    hw = [hardware] if isinstance(hardware, str) else list(hardware)
    places = g.parse_placements(placements if isinstance(placements, str) else ",".join(placements)) if placements else []
    pricings = [g.Pricing(h, None, p) for h in hw for p in places]
    groups = pc.compare(_traces(traces), names, budget, lams, pricings, g.Settings(cost or CostConfig()), score, folds,
                        replay=replay)
    return pc.to_dict(groups, budget, lams, score, folds)


def predictor_tables(doc: dict[str, Any]) -> list[str]:
    """The Markdown tables `ecosim predictor compare --markdown` prints for a `compare_predictors` document."""
    return [pc.markdown_table(*t) for t in pc.summary_tables(doc)]


def published(profile: str = "cuda-graphs", fit: bool = True) -> dict[str, Any]:
    """`ecosim fidelity` as data: every published measurement the simulator can reproduce, predicted
    under `profile` (a shipped serving profile's name or a JSON file). With `fit`, the profile's free
    constants are refitted on the rows marked fit (the rest held out, fit rows also leave-one-out).

    Returns {"results": [fidelity.Result], "fitted": {constant: seconds}, "skipped": [row],
    "summary": the error summary, "plain_metrics": the metric names of plain-decode rows}."""
    results, theta, skipped = _fidelity.run(load_serving(profile), fit=fit, rows=_fidelity.load_rows())
    return {"results": results, "fitted": dict(zip(_fidelity.FREE, map(float, theta))), "skipped": skipped,
            "summary": _fidelity.summary(results), "plain_metrics": _fidelity.PLAIN}
