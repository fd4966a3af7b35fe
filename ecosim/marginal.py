"""Cost in seconds for a selection policy: the step time of a selection, and the marginal time of
adding one node to it, priced by the same CostModel the replay charges.

A step's time is (ecosim/cost/)

    t_step(S) = sum over MoE layers l of  max over devices d of F(u_ld(S), n(S))     [+ copy(m_l)]
              + O(n(S), context) + draft (if S holds more than the root)

where u_ld is the number of distinct experts device d reads in layer l, n the tokens verified,
F a layer's time on one device, O everything outside the routed experts, and m_l the layer's
experts missing from the offload cache. So the marginal time of a node x given S is

    dt(x | S) = t_step(S + x) - t_step(S):
      its new experts per device group, one more token's compute (F and O at n + 1),
      the copies of its new experts that the offload cache does not hold,
      and the draft, when x is the first node besides the root.

Nothing here names a placement: the pricer asks the placement object, and the cost model's
`layer_times` reads the same object, so each placement's rule comes from one place:

    hbm        one group; a new expert is read whole at HBM bandwidth.
    tp:N       one group; each device reads 1/N of each new expert (`expert_fraction`) and does
               1/N of the FLOPs; the per-layer all-reduces grow with the tokens, not the experts,
               so they are the same for every node (`allreduces`, in F through collective_time).
    ep:N       N groups (`group_masks`): a layer waits for its slowest group, so a node's new
               experts cost only what they add to the straggler (free on a group still below it);
               the all-to-alls grow with the tokens only.
    tp:N+ep:M  both: M groups, each reading 1/N of its experts.
    offload    one group and a cache (`cache()`, `stateful`): a node's new experts that the cache
               holds are free, the others pay a PCIe copy each (`copy_time`), given the cache
               state the step sees (the policy carries it along the request's trajectory).

`StepPricer` tabulates F over (experts on one group, tokens) and O over tokens by calling the
CostModel's public methods (`layer_times`, `other_times`, `draft_time`), so whatever those charge
(per-layer fixed costs, shares of a placement) a policy sees too, and a selection's step time here
equals what the replay charges for it (a test holds them together). Assumptions: every MoE layer
costs the same for the same reads (true of ecosim/cost/; a model with per-layer costs would need a
table per layer); and with a grouped-GEMM tile (`gemm_tile_rows` > 0) under ep:N, F's compute
efficiency is taken from the straggler group's experts instead of the layer's whole union (exact
when memory-bound or with one group).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ecosim import bitsets
from ecosim.cost import CostModel


@dataclass(frozen=True)
class StepPricer:
    """Tables of one cost model, for selections of at most `max_tokens` tokens."""

    layer: np.ndarray  # (experts per group + 1, max_tokens + 2): F(u, n), seconds of one layer
    copy: float  # seconds per expert copied over PCIe (0 without a cache)
    draft: float  # seconds of drafting a speculative step
    masks: np.ndarray  # (groups, words) the experts each group holds (the placement's group_masks)
    layers: int
    num_experts: int
    cost: CostModel
    steps: tuple[np.ndarray, np.ndarray, np.ndarray]  # layer_steps(layer), for the auto growth

    @property
    def groups(self) -> int:
        return len(self.masks)

    @classmethod
    def of(cls, cost: CostModel, max_tokens: int) -> StepPricer:
        m, p = cost.model, cost.placement
        masks = p.group_masks(m.num_experts)
        per_group = int(bitsets.count(masks).max())
        tokens = np.arange(max_tokens + 2)
        # F(u, n) = layer_times with u experts on group 0 and none elsewhere: the max over groups
        # is group 0's time (a group's time never falls as it reads more), plus the collectives.
        union = np.zeros((len(tokens), per_group + 1, len(masks)))
        union[:, :, 0] = np.arange(per_group + 1)
        layer = cost.layer_table(union, tokens).T
        copy = float(cost.copy_time(np.ones(1))[0]) if p.stateful else 0.0
        layer = np.ascontiguousarray(layer)
        return cls(layer, copy, cost.draft_time(speculative=True), masks, m.num_moe_layers, m.num_experts, cost,
                   layer_steps(layer))

    def other(self, context: np.ndarray, max_tokens: int) -> np.ndarray:
        """(trees, max_tokens + 2) O(n, context): seconds outside the routed experts, no draft."""
        n = np.arange(max_tokens + 2, dtype=np.int64)
        ctx = np.repeat(np.asarray(context, dtype=np.int64), len(n))
        tok = np.tile(n, len(context))
        return self.cost.other_times(tok, ctx, speculative=False).reshape(len(context), len(n))

    def group_of(self) -> np.ndarray:
        """(experts,) the group holding each expert, from the placement's masks."""
        return np.argmax(bitsets.unpack(self.masks, self.num_experts), axis=0)

    def step_time(self, per_device: np.ndarray, tokens: int, context: int, misses: np.ndarray | None = None) -> float:
        """t_step of one selection: `per_device` (layers, groups) distinct experts each group reads,
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
        dev = self.group_of()
        counts = np.zeros((self.layers, self.groups), dtype=np.int64)
        np.add.at(counts.T, dev, experts.T)
        grown = experts | node
        after = np.zeros_like(counts)
        np.add.at(after.T, dev, grown.T)
        miss = None if resident is None else (experts & ~resident).sum(axis=1)
        miss_after = None if resident is None else (grown & ~resident).sum(axis=1)
        n = int(selected)
        return self.step_time(after, n + 1, context, miss_after) - self.step_time(counts, n, context, miss)


def layer_steps(layer: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the auto growth reads of a layer table F (experts + 1, tokens), once per table rather
    than once per grown tree: (lo, hi) (experts + 1, tokens), the least and greatest expert step
    F(e + 1, j) - F(e, j) over e > i (inf / -inf where there is none), so "F(., j) is affine from i
    up" is one comparison; and (tokens,) the least token step F(e, j + 1) - F(e, j) over e (0 in
    the last column)."""
    E, T = layer.shape
    lo, hi = np.full((E, T), np.inf), np.full((E, T), -np.inf)
    d = np.diff(layer, axis=0)  # d[e] = F(e + 1) - F(e)
    lo[: E - 2] = np.minimum.accumulate(d[::-1], axis=0)[::-1][1:]
    hi[: E - 2] = np.maximum.accumulate(d[::-1], axis=0)[::-1][1:]
    token = np.zeros(T)
    if T > 1:
        token[: T - 1] = np.diff(layer, axis=1).min(axis=0)
    return lo, hi, token
