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
# `ecosim replay` without --max-memory says when a trace's working set would take more than this
# share of the memory available as it starts, and what --max-memory to give (this share of it).
AUTO_SHARE = 0.5
# ... and replays it in pieces by itself (one stderr line says so) when the working set would take
# more than STREAM_SHARE of it (`--stream-share`; 0 never switches): where the whole replay would
# most likely not fit at all. Not sooner: a piece holds fewer requests, so what a policy fits on
# the whole trace (the acceptance calibration, a predictor trained on the other requests, evict's
# profile) is fitted per piece instead.
STREAM_SHARE = 0.9


def max_rows(path: Path, max_memory: float) -> int:
    manifest = read_manifest(path)
    node_file(path)  # a damaged file: one line naming it
    return max(1, int(max_memory // (WORKING_SET * row_bytes(manifest, gates=False))))  # a replay keeps no gates


def available_memory() -> float | None:
    """Bytes of memory available to a new allocation now (Linux's MemAvailable); None elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def auto_budget(path: Path, available: float | None = None) -> float | None:
    """The memory budget to replay `path` in pieces within, when its whole replay's working set
    (node rows x bytes per row x WORKING_SET) would exceed AUTO_SHARE of the available memory and
    its largest request fits that share; None: replay it whole."""
    plan = stream_plan(path, available)
    return plan[0] if plan else None


def stream_plan(path: Path, available: float | None = None) -> tuple[float, float] | None:
    """(budget, working set / available memory) where `auto_budget` gives a budget, else None.
    Reads the manifest and the Parquet footers and positions only; a file that cannot be read so
    gives None (the whole read then refuses it with the gate's one line)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    available = available_memory() if available is None else available
    if not available:
        return None
    budget = AUTO_SHARE * available
    try:
        manifest = read_manifest(path)
        nodes = node_file(path)
        per_row = WORKING_SET * row_bytes(manifest, gates=False)  # a replay keeps no gates
        whole = nodes.metadata.num_rows * per_row
        if whole <= budget:
            return None
        positions = pq.read_table(path / "positions.parquet", columns=["request_id", "n_nodes"])
        per_request = np.bincount(np.unique(positions["request_id"].to_numpy(), return_inverse=True)[1],
                                  positions["n_nodes"].to_numpy().astype(np.int64))
    except (EcoSimError, OSError, pa.ArrowException, ValueError, KeyError, TypeError):
        return None
    return (budget, whole / available) if per_request.max(initial=0) * per_row <= budget else None


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
    for chunk in iter_request_chunks(path, rows, gates=False):
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
