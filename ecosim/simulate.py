"""Replay several policies over several traces and compare them against `ar` and the oracle."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ecosim.catalog.devices import Device
from ecosim.cost import CostConfig, CostModel
from ecosim.metrics import Row, total
from ecosim.placement import Placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.trace.io import Trace

AR = PolicySpec("ar")
ORACLE = PolicySpec("oracle")


@dataclass
class PolicyResult:
    spec: PolicySpec
    rows: list[Row]  # one per trace
    total: Row


def cost_model(trace: Trace, device: Device, placement: Placement, config: CostConfig) -> CostModel:
    """The cost model for one trace: its own shape, tree depth and draft size."""
    m = trace.manifest
    return CostModel(
        trace.model, device, placement, config,
        tree_depth=int(m["tree"].get("depth", 0)),
        draft_bytes=float(m["draft"].get("bytes", 0)),
    )


def compare(
    replays: list[TraceReplay],
    specs: Iterable[PolicySpec],
    device: Device,
    placement: Placement,
    config: CostConfig,
    engine: str = "fast",
    progress: Callable[[], None] | None = None,
) -> list[PolicyResult]:
    """Each policy over every trace, with speedup over `ar` and fraction of the oracle filled in."""
    from ecosim.des import des_run  # local: simpy only loads when asked for

    def one(r: TraceReplay, spec: PolicySpec) -> Row:
        cost = cost_model(r.trace, device, placement, config)
        row = des_run(r, spec, cost).row if engine == "des" and spec.name != "oracle" else r.run(spec, cost)
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
