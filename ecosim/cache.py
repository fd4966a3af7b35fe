"""The offload placement's expert cache: CAP experts per MoE layer in HBM, LRU or LFU.

Its state follows the steps in the order an engine runs them, so every policy warms and
thrashes the cache along its own trajectory. Both engines use this one class: the event engine
calls `access` step by step, the fast engine `walk` over a whole trajectory (the same steps, so
the same misses; a test holds the two together).

A cache's misses depend only on the sequence of step unions, never on bandwidth or compute, so
the fast engine walks a trajectory once per (selection, capacity, eviction) and reuses the misses
for every device it prices (see replay.py).
"""

from __future__ import annotations

import numpy as np

from ecosim import bitsets

UNPACK_BYTES = 8 << 20  # needed-expert tables unpacked at a time by `walk`


class ExpertCache:
    """Per-layer residency; `access` returns the misses of one step's needed experts."""

    def __init__(self, layers: int, num_experts: int, capacity: int, eviction: str = "lru"):
        self.num_experts, self.capacity, self.eviction = num_experts, capacity, eviction
        self.resident = np.zeros((layers, num_experts), dtype=bool)
        self.last_use = np.zeros((layers, num_experts), dtype=np.int64)
        self.uses = np.zeros((layers, num_experts), dtype=np.int64)
        self.count = np.zeros(layers, dtype=np.int64)  # resident experts per layer
        self.clock = 0

    def access(self, union_bits: np.ndarray) -> np.ndarray:
        """Misses per layer for one step reading `union_bits` (layers, words); then update state.

        A layer needing more than CAP experts streams the excess: all misses are counted, and the
        CAP most valuable (by recency, or by use count then recency) stay resident.
        """
        return self._step(bitsets.unpack(union_bits, self.num_experts))

    def walk(self, bits: np.ndarray) -> np.ndarray:
        """(steps, layers) misses of the steps `bits` (steps, layers, words), in order: exactly
        `np.stack([access(b) for b in bits])`, with the needed experts unpacked a block at a time."""
        n, layers = bits.shape[0], bits.shape[1]
        out = np.zeros((n, layers), dtype=np.int64)
        block = max(1, UNPACK_BYTES // max(1, layers * self.num_experts))
        for a in range(0, n, block):
            need = bitsets.unpack(bits[a : a + block], self.num_experts)
            for i, step_need in enumerate(need):
                out[a + i] = self._step(step_need)
        return out

    def _step(self, need: np.ndarray) -> np.ndarray:
        """One step over the (layers, experts) bool table of needed experts.

        Only layers over capacity after the step are ranked, each on the same int64 row the rule
        defines (minus the priority of each resident expert, its recency or its use count then
        recency; 1 for the others), so `np.argpartition` breaks ties among equal priorities as it
        always has. A layer over capacity holds more than CAP residents, so the CAP it keeps are
        all residents.
        """
        self.clock += 1
        misses = _count_rows(np.greater(need, self.resident))  # needed and not resident
        self.resident |= need
        np.copyto(self.last_use, self.clock, where=need)
        if self.eviction == "lfu":
            self.uses += need
        self.count += misses
        over = self.count > self.capacity
        n_over = int(np.count_nonzero(over))
        if n_over:
            whole = n_over == len(over)
            rows = slice(None) if whole else np.flatnonzero(over)
            if self.eviction == "lfu":
                priority = self.uses[rows] * (self.clock + 1) + self.last_use[rows]
            else:
                priority = self.last_use[rows]
            order = np.where(self.resident[rows], -priority, 1)
            keep = np.argpartition(order, self.capacity - 1, axis=1)[:, : self.capacity]
            kept = np.zeros((n_over, self.num_experts), dtype=bool)
            kept.ravel()[keep + (np.arange(n_over) * self.num_experts)[:, None]] = True
            self.resident[rows] = kept
            self.count[rows] = self.capacity
        return misses


def _count_rows(table: np.ndarray) -> np.ndarray:
    """True entries per row of a 2-D bool table (a popcount of its bytes, 8 at a time)."""
    if table.shape[1] % 8 == 0 and table.flags.c_contiguous:
        return np.bitwise_count(table.view(np.uint64)).sum(axis=1, dtype=np.int64)
    return np.count_nonzero(table, axis=1).astype(np.int64)
