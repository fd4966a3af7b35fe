"""The steps a policy takes through a trace, and the Row they add up to (both engines).

A replay walks each request from pos to pos + accepted + 1 (`walk`), ORs the true experts of the
selected nodes of each visited tree into the step's union (`union_bits`), and totals the priced
steps into a `Row` (`make_row`); the fast engine (replay.py) and the event engine (des.py) share them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ecosim import bitsets
from ecosim.metrics import Row
from ecosim.trace.io import Trace
from ecosim.tree import Trees


@dataclass
class Steps:
    """The verification steps one policy takes through a trace, in the order they run."""

    request: np.ndarray  # request id of each step
    tree: np.ndarray  # index of the candidate tree (position row) each step verifies
    tokens: np.ndarray  # tokens the step yields (accepted + 1, cut at the request's end)
    verified: np.ndarray  # tokens verified (selected nodes, root included)
    bits: np.ndarray  # (steps, layers, words) union of the verified nodes' true experts
    context: np.ndarray  # context length before the root
    drafted: np.ndarray  # draft steps the step asks for (float; inf: all the setting's N; 0: no draft)

    def __len__(self) -> int:
        return len(self.tree)

    @property
    def speculative(self) -> np.ndarray:
        """Whether a draft tree was built for the step."""
        return self.drafted > 0


def walk(trees: Trees, accept: np.ndarray) -> np.ndarray:
    """Trees visited when each request steps from pos to pos + accept[pos] + 1."""
    visited: list[int] = []
    acc = accept.tolist()
    for _, sl in trees.request_slices():
        p, end = sl.start, sl.stop
        while p < end:
            visited.append(p)
            p += acc[p] + 1
    return np.asarray(visited, dtype=np.int64)


def union_bits(trace: Trace, trees: Trees, selected: np.ndarray, visited: np.ndarray) -> np.ndarray:
    """(steps, layers, words): OR of the true-expert bitsets of each visited tree's selected rows."""
    in_step = np.zeros(trees.n_trees, dtype=bool)
    in_step[visited] = True
    rows = np.flatnonzero(selected & in_step[trees.tree_of_row])
    step = np.cumsum(np.diff(trees.tree_of_row[rows], prepend=-1) != 0) - 1  # rows are in tree order
    n = int(step[-1]) + 1 if len(rows) else 0
    return bitsets.pack_groups(trace.experts_3d(), step, n, trace.model.num_experts, rows=rows)


def make_row(trace: Trace, steps: Steps, n_steps: int, loads: int, misses: float, time_s: float,
             requests: int | None = None, expert_bytes: float | None = None, draft_s: float = 0.0,
             draft_levels: float = 0.0) -> Row:
    """The Row of a replay of `trace` along `steps` (either engine: the event engine batches the
    same steps into fewer forwards, so it gives its own step count, loads, misses and time)."""
    eb = float(trace.model.expert_bytes if expert_bytes is None else expert_bytes)  # the priced dtype's (--dtype)
    return Row(
        trace=trace.name,
        provenance=trace.provenance,
        requests=len(trace.manifest["requests"]) if requests is None else requests,
        tokens=int(steps.tokens.sum()),
        steps=n_steps,
        verified=int(steps.verified.sum()),
        expert_loads=loads,
        expert_bytes=loads * eb,
        pcie_bytes=misses * eb,
        time_s=time_s,
        draft_s=draft_s,
        draft_levels=draft_levels,
    )
