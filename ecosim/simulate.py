"""Replay several policies over several traces and compare them against `ar` and the oracle.

Every engine is an `Engine`: the fast one (replay.TraceReplay), the event one (des.DesReplay) and
the streamed one (stream.StreamedReplay) each run one policy over one trace into a Row, and
`compare` is the one loop that runs them and fills in the ratios.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ecosim.catalog.devices import Device
from ecosim.cost import CostConfig, CostModel
from ecosim.metrics import Row, total
from ecosim.catalog.drafts import draft_cost
from ecosim.placements import Placement
from ecosim.policies import PolicySpec, registry
from ecosim.trace.cut import truncate
from ecosim.trace.io import Trace

AR = PolicySpec(registry.baseline().name)
ORACLE = PolicySpec(registry.bound().name)


class Engine(Protocol):
    """Replays one trace: `trace` (its manifest at least: the cost model and labels read it) and
    `run`, one policy's totals under one cost model (the bound included)."""

    @property
    def trace(self) -> Trace: ...

    def run(self, spec: PolicySpec, cost: CostModel) -> Row: ...


@dataclass
class PolicyResult:
    spec: PolicySpec
    rows: list[Row]  # one per trace
    total: Row


def cost_model(trace: Trace, device: Device, placement: Placement, config: CostConfig, check: bool = True) -> CostModel:
    """The cost model for one trace: its own shape, tree depth (the setting's draft steps N: the recorded
    depth, or the depth `at_steps` cut it to) and draft (drafts.py). Refuses a
    placement whose weights and the KV of the trace's longest context do not fit a device (unless
    `check` is False: a benchmark of the replay's own speed, not of a deployment)."""
    m = trace.manifest
    cost = CostModel(
        trace.model, device, placement, config,
        tree_depth=int(m["tree"].get("depth", 0)),
        draft=draft_cost(m.get("draft") or {}, trace.model),
    )
    if check:
        cost.check(max_context(trace))
    return cost


def at_steps(trace: Trace, steps: int | None) -> Trace:
    """The trace a setting of `steps` draft steps sees: its trees cut to that depth (trace/cut.py);
    None: as recorded."""
    return trace if steps is None else truncate(trace, steps)


def step_draft_time(spec: PolicySpec, cost: CostModel) -> float:
    """Seconds of the draft side of a step of `spec` that drafts all it may: its own steps (a preset's,
    a chain's), at most the setting's N (policies/base.py DRAFTING_RULE); 0 for a policy that never drafts."""
    p = spec.policy
    if not spec.speculative:
        return 0.0
    own = p.steps(spec.values) if p.steps is not None else cost.tree_depth
    return cost.draft_time(True, min(own, cost.tree_depth))


def max_context(trace: Trace) -> int:
    """The longest context a step of the trace attends to (context before the root + its tree)."""
    pos = trace.positions
    if "context_len" not in pos or len(pos["context_len"]) == 0:  # a streamed trace's manifest-only view
        return 0
    return int((pos["context_len"].astype("int64") + pos["n_nodes"].astype("int64")).max())


def compare(
    replays: list[Engine],
    specs: Iterable[PolicySpec],
    device: Device,
    placement: Placement,
    config: CostConfig,
    progress: Callable[[], None] | None = None,
) -> list[PolicyResult]:
    """Each policy over every trace, with speedup over `ar` and fraction of the oracle filled in."""

    def one(r: Engine, spec: PolicySpec) -> Row:
        row = r.run(spec, cost_model(r.trace, device, placement, config))
        if progress:
            progress()
        return row

    ar = [one(r, AR) for r in replays]
    oracle = [one(r, ORACLE) for r in replays]
    ar_total, oracle_total = total(ar), total(oracle)
    results = []
    for spec in specs:
        if spec == AR:
            rows = ar
        elif spec == ORACLE:
            rows = oracle
        else:
            rows = [one(r, spec) for r in replays]
        for row, a, o in zip(rows, ar, oracle):
            row.compare(a, o)
        results.append(PolicyResult(spec, rows, total(rows).compare(ar_total, oracle_total)))
    return results
