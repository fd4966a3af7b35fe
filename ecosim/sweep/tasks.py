"""What a worker runs: one selection on one trace, priced under every variant of its task; or a
batch of such tasks that share work.

The same function runs in the driver (`--jobs 1`), in a process-pool worker and in a Ray worker.
A worker keeps the last few traces it read (with their trees and predictions), so consecutive
tasks on one trace read it once; the steps of a selection are dropped when its task ends.

What is shared, and where:
- a selection's walk, unions and offload cache walk serve every pricing of its task (bandwidth,
  device and placement never change which steps are taken, and the cache's misses depend on the
  steps and the capacity alone);
- an ordered policy (ecospec, confidence: policies/base.py) at one setting of its other knobs on
  one trace is one `Batch` over its budgets: the order is computed once, at the largest budget,
  and every smaller budget is a prefix of it;
- a worker keeps the rows it priced by selection fingerprint, so a selection another task already
  made (ecospec at a lambda large enough to keep only a few nodes, the same at every budget) is
  priced once per worker.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from ecosim.placements import parse_placement
from ecosim.replay import TraceReplay
from ecosim.simulate import at_steps, cost_model
from ecosim.sweep.grid import Task, TraceRef
from ecosim.trace.io import read_trace

KEEP_TRACES = 2  # traces a worker keeps in memory between tasks
_replays: OrderedDict[tuple[str, str, int | None], TraceReplay] = OrderedDict()


def _replay(ref: TraceRef) -> TraceReplay:
    """The trace as the task's setting sees it: cut to its draft steps (trace/cut.py)."""
    key = (ref.path, ref.fingerprint, ref.steps)
    if key in _replays:
        _replays.move_to_end(key)
        return _replays[key]
    while len(_replays) >= KEEP_TRACES:
        _replays.popitem(last=False)
    r = TraceReplay(at_steps(read_trace(ref.path, gates=False), ref.steps))
    _replays[key] = r
    return r


@dataclass
class Batch:
    """Tasks one worker runs together, in order, on one view of their trace (see the module docstring)."""

    tasks: list[Task]

    @property
    def trace(self) -> TraceRef:
        return self.tasks[0].trace

    @property
    def weight(self) -> float:
        return sum(t.weight for t in self.tasks)


def batch_tasks(tasks: list[Task]) -> list[Task | Batch]:
    """Tasks of an ordered policy differing only in budget become one Batch (largest budget first);
    heavy work first, in the order of the traces."""
    out: list[Task | Batch] = []
    batches: dict[tuple, Batch] = {}
    for t in tasks:
        s = t.selection
        budget = s.policy.budget if s.policy.order is not None else None
        if budget is None:
            out.append(t)
            continue
        key = (t.trace, s.cache_key(without=budget))
        if key not in batches:
            batches[key] = Batch([])
            out.append(batches[key])
        batches[key].tasks.append(t)
    for b in batches.values():
        b.tasks.sort(key=lambda t: -t.selection.values[t.selection.policy.budget])
    order = {ref: i for i, ref in enumerate(dict.fromkeys(w.trace for w in out))}
    return sorted(out, key=lambda w: (order[w.trace], -w.weight))


def run_task(task: Task | Batch) -> list[tuple[str, dict[str, Any]]]:
    """(config id, raw Row fields) per pricing of the task (of each task of a batch, in order);
    ratios are filled in by the driver."""
    tasks = task.tasks if isinstance(task, Batch) else [task]
    # A view for this work: shares the trace's own work (trees, predictions, ranks, offsets, the
    # oracle's chain unions) and the rows priced so far; pick orders live as long as the batch,
    # steps and cache walks as long as a task.
    r = _replay(tasks[0].trace).view()
    out = []
    for t in tasks:
        for cid, p in t.pricings:
            cost = cost_model(r.trace, t.settings.device(p), parse_placement(p.placement), t.settings.cost)
            out.append((cid, asdict(r.run(t.selection, cost))))
        r.forget_steps()
    return out
