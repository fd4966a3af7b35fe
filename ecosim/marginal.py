"""Cost in seconds for a selection policy: the step time of a selection, and the marginal time of
adding one node to it, priced by the same CostModel the replay charges.

A step's time is (cost.py)

    t_step(S) = sum over MoE layers l of  max over devices d of F(u_ld(S), n(S))     [+ copy(m_l)]
              + O(n(S), context) + draft (if S holds more than the root)

where u_ld is the number of distinct experts device d reads in layer l, n the tokens verified,
F a layer's time on one device (its HBM reads and routed compute, plus the all-to-all that
`layer_times` adds under ep:N), O everything outside the routed experts, and m_l the layer's
experts missing from the offload cache. So the marginal time of a node x given S is

    dt(x | S) = t_step(S + x) - t_step(S):
      its new experts per device (a layer waits for its slowest device under ep:N),
      one more token's compute (F and O at n + 1),
      the copies of its new experts that the offload cache does not hold (hits are free),
      and the draft, when x is the first node besides the root.

`StepPricer` tabulates F over (experts on one device, tokens) and O over tokens by calling the
CostModel's public methods (`layer_times`, `other_times`, `draft_time`), so whatever those charge
(per-layer fixed costs, shares of a placement) a policy sees too, and a selection's step time here
equals what the replay charges for it (a test holds them together). Assumption: every MoE layer
costs the same for the same reads (true of cost.py; a model with per-layer costs would need a
table per layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ecosim.cost import CostModel


@dataclass(frozen=True)
class StepPricer:
    """Tables of one cost model, for selections of at most `max_tokens` tokens."""

    layer: np.ndarray  # (experts per device + 1, max_tokens + 2): F(u, n), seconds of one layer
    copy: float  # seconds per expert copied over PCIe (0 unless offload)
    draft: float  # seconds of drafting a speculative step
    devices: int  # devices the experts are split over (contiguous blocks)
    layers: int
    num_experts: int
    cost: CostModel

    @classmethod
    def of(cls, cost: CostModel, max_tokens: int) -> StepPricer:
        m = cost.model
        p = cost.placement
        devices = p.groups
        per_device = -(-m.num_experts // devices)
        tokens = np.arange(max_tokens + 2)
        # F(u, n) = layer_times with u experts on device 0 and none elsewhere: the max over devices
        # is device 0's time (a device's time never falls as it reads more), plus the all-to-all.
        union = np.zeros((len(tokens), per_device + 1, devices))
        union[:, :, 0] = np.arange(per_device + 1)
        layer = cost.layer_times(union if devices > 1 else union[..., 0], tokens).T
        copy = float(cost.copy_time(np.ones(1))[0]) if p.stateful else 0.0
        return cls(np.ascontiguousarray(layer), copy, cost.draft_time(speculative=True), devices, m.num_moe_layers,
                   m.num_experts, cost)

    def other(self, context: np.ndarray, max_tokens: int) -> np.ndarray:
        """(trees, max_tokens + 2) O(n, context): seconds outside the routed experts, no draft."""
        n = np.arange(max_tokens + 2, dtype=np.int64)
        ctx = np.repeat(np.asarray(context, dtype=np.int64), len(n))
        tok = np.tile(n, len(context))
        return self.cost.other_times(tok, ctx, speculative=False).reshape(len(context), len(n))

    def device_of(self) -> np.ndarray:
        """(experts,) device holding each expert: contiguous blocks, as placement.py says."""
        per_device = -(-self.num_experts // self.devices)
        return np.arange(self.num_experts) // per_device

    def step_time(self, per_device: np.ndarray, tokens: int, context: int, misses: np.ndarray | None = None) -> float:
        """t_step of one selection: `per_device` (layers, devices) distinct experts each device reads,
        `tokens` verified (root included), `misses` (layers,) offload copies. Speculative iff tokens > 1."""
        t = self.layer[per_device, tokens].max(axis=-1).sum()
        if misses is not None:
            t += self.copy * float(np.sum(misses))
        t += self.other(np.array([context]), tokens)[0, tokens]
        return float(t + (self.draft if tokens > 1 else 0.0))

    def marginal_time(self, experts: np.ndarray, selected: np.ndarray, node: np.ndarray, context: int,
                      resident: np.ndarray | None = None) -> float:
        """dt(x | S): `experts` (layers, experts) bool of the predicted experts of S (root included),
        `selected` its token count, `node` (layers, experts) bool of x's predicted experts,
        `resident` (layers, experts) bool of the offload cache (None: no cache)."""
        dev = self.device_of()
        counts = np.zeros((self.layers, self.devices), dtype=np.int64)
        np.add.at(counts.T, dev, experts.T)
        grown = experts | node
        after = np.zeros_like(counts)
        np.add.at(after.T, dev, grown.T)
        miss = None if resident is None else (experts & ~resident).sum(axis=1)
        miss_after = None if resident is None else (grown & ~resident).sum(axis=1)
        n = int(selected)
        return self.step_time(after, n + 1, context, miss_after) - self.step_time(counts, n, context, miss)
