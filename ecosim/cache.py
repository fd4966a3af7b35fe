"""The offload placement's expert cache: CAP experts per MoE layer in HBM, LRU or LFU.

Its state follows the steps in the order an engine runs them, so every policy warms and
thrashes the cache along its own trajectory. Both engines use this one class.
"""

from __future__ import annotations

import numpy as np

from ecosim import bitsets


class ExpertCache:
    """Per-layer residency; `access` returns the misses of one step's needed experts."""

    def __init__(self, layers: int, num_experts: int, capacity: int, eviction: str = "lru"):
        self.num_experts, self.capacity, self.eviction = num_experts, capacity, eviction
        self.resident = np.zeros((layers, num_experts), dtype=bool)
        self.last_use = np.zeros((layers, num_experts), dtype=np.int64)
        self.uses = np.zeros((layers, num_experts), dtype=np.int64)
        self.clock = 0

    def access(self, union_bits: np.ndarray) -> np.ndarray:
        """Misses per layer for one step reading `union_bits` (layers, words); then update state.

        A layer needing more than CAP experts streams the excess: all misses are counted, and the
        CAP most valuable (by recency, or by use count then recency) stay resident.
        """
        self.clock += 1
        need = bitsets.unpack(union_bits, self.num_experts)
        misses = (need & ~self.resident).sum(axis=1)
        self.resident |= need
        self.last_use[need] = self.clock
        self.uses[need] += 1
        over = self.resident.sum(axis=1) > self.capacity
        if over.any():
            if self.eviction == "lfu":
                priority = self.uses * (self.clock + 1) + self.last_use
            else:
                priority = self.last_use.copy()
            priority = np.where(self.resident, priority, -1)[over]
            keep = np.argpartition(-priority, self.capacity - 1, axis=1)[:, : self.capacity]
            kept = np.zeros_like(priority, dtype=bool)
            np.put_along_axis(kept, keep, True, axis=1)
            self.resident[over] = kept & (priority >= 0)
        return misses
