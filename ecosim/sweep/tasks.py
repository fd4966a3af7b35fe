"""What a worker runs: one selection on one trace, priced under every variant of its task.

The same function runs in the driver (`--jobs 1`), in a process-pool worker and in a Ray worker.
A worker keeps the last few traces it read (with their trees and predictions), so consecutive
tasks on one trace read it once; the steps of a selection are dropped when its task ends.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from ecosim.placement import parse_placement
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.sweep.grid import Task, TraceRef
from ecosim.trace.io import read_trace

KEEP_TRACES = 2  # traces a worker keeps in memory between tasks
_replays: OrderedDict[tuple[str, str], TraceReplay] = OrderedDict()


def _replay(ref: TraceRef) -> TraceReplay:
    key = (ref.path, ref.fingerprint)
    if key in _replays:
        _replays.move_to_end(key)
        return _replays[key]
    while len(_replays) >= KEEP_TRACES:
        _replays.popitem(last=False)
    r = TraceReplay(read_trace(ref.path))
    _replays[key] = r
    return r


def run_task(task: Task) -> list[tuple[str, dict[str, Any]]]:
    """(config id, raw Row fields) per pricing of the task; ratios are filled in by the driver."""
    base = _replay(task.trace)
    # A task-local view: shares the trace, trees, predictions and their offsets, the confidence
    # ranks, the oracle's chain unions; not the selection's steps or cache misses (dropped with it).
    base.trees  # built once, before the view copies the reference
    if task.selection.policy == "oracle":
        base.chain_unions()
    if task.selection.policy == "confidence":
        base.confidence_rank()
    r = dataclasses.replace(base, _steps={}, _misses={})
    spec = task.selection.spec()
    out = []
    for cid, p in task.pricings:
        cost = cost_model(r.trace, task.settings.device(p), parse_placement(p.placement), task.settings.cost)
        out.append((cid, asdict(r.run(spec, cost))))
    return out
