"""Replay in pieces: traces larger than the memory budget (`ecosim replay --max-memory`).

Requests are independent trajectories, so a trace is replayed one chunk of whole requests at a
time: each chunk's steps (a few bitsets per step) are kept and its nodes dropped. The steps are
then priced together, in order, so the offload cache still follows the whole trajectory. The
result equals the in-memory replay exactly (a test holds them together).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ecosim.cost import CostModel
from ecosim.metrics import Row
from ecosim.policies import PolicySpec
from ecosim.errors import EcoSimError
from ecosim.replay import TraceReplay, no_positions, summarize
from ecosim.steps import Steps
from ecosim.trace.cut import truncate
from ecosim.trace.io import Trace, iter_request_chunks, read_manifest, row_bytes
from ecosim.trace.read import node_file

# Working memory per node row, as a multiple of its size as arrays: the row, its experts packed as
# bitsets (as large again for top-8 of 256), Parquet decoding and the selection's temporaries.
# Measured with bench/memory.py (peak RSS above the ~100 MB of the interpreter and libraries).
WORKING_SET = 8


def max_rows(path: Path, max_memory: float) -> int:
    manifest = read_manifest(path)
    gates = node_file(path).schema_arrow.get_field_index("gates") >= 0  # a damaged file: one line naming it
    return max(1, int(max_memory // (WORKING_SET * row_bytes(manifest, gates))))


def concat(parts: list[Steps]) -> Steps:
    return Steps(*(np.concatenate([getattr(p, f) for p in parts]) for f in Steps.__dataclass_fields__))


def run_streamed(path: Path, spec: PolicySpec, cost: CostModel, max_memory: float, steps: int | None = None) -> Row:
    """One policy over one trace, never holding more than about `max_memory` bytes of nodes; with
    `steps`, each chunk's trees cut to that depth (trace/cut.py)."""
    parts, first = [], None
    bound = spec.policy.is_bound
    rows = max_rows(path, max_memory)
    if not sum(int(r["positions"]) for r in read_manifest(path)["requests"]):
        raise EcoSimError(no_positions(path))
    for chunk in iter_request_chunks(path, rows):
        replay = TraceReplay(chunk if steps is None else truncate(chunk, steps))
        first = first or replay
        parts.append(replay.oracle_steps(cost) if bound else replay.steps(spec, cost))
    if first is None:
        raise EcoSimError(no_positions(path))
    requests = len(read_manifest(path)["requests"])
    return summarize(first, concat(parts), cost, cache=not bound, requests=requests)


@dataclass
class StreamedReplay:
    """The fast engine where the trace must not be loaded whole (a simulate.Engine)."""

    path: Path
    max_memory: float
    steps: int | None = None  # the setting's draft steps: trees cut to this depth (None: as recorded)

    @cached_property
    def trace(self) -> Trace:
        """The manifest only (no rows): enough for the cost model and the labels."""
        whole = Trace(self.path, read_manifest(self.path), {}, {})
        return whole if self.steps is None else truncate(whole, self.steps)

    def run(self, spec: PolicySpec, cost: CostModel) -> Row:
        return run_streamed(self.path, spec, cost, self.max_memory, self.steps)
