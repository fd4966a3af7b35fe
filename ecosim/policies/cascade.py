"""`cascade` (Cascade, arXiv 2506.20675): per request, alternate a test phase, trying each draft
length K for `TEST_STEPS` steps and measuring utility = (tokens per step) x t_ar / t_step, and a set
phase of `SET_STEPS` steps that runs the K of the best utility, or no speculation (no draft) when no
utility reached 1. K's candidates are 1..the tree's depth on the draft's greedy chain, as in vLLM.
The test and set lengths are ours: the paper's values were not available to us. A step of length K
drafts K steps and stops (`drafting="stops"`): it pays K draft forwards, speculation off pays none.
"""

from __future__ import annotations

import numpy as np

from ecosim import bitsets
from ecosim.policies.base import Context, Knobs, Policy
from ecosim.policies.presets import chain

TEST_STEPS = 2
SET_STEPS = 32


def cascade_choice(utility: dict[int, float]) -> int:
    """The set phase's draft length: the K of the greatest utility, or 0 (speculation off) when
    none reaches 1 (speculating would be slower than not)."""
    best = max(utility, key=utility.__getitem__, default=0)
    return best if best and utility[best] >= 1.0 else 0


def utility(tokens: float, seconds: float, ar_seconds: float) -> float:
    """Speculation utility: token gain over verification cost, (tokens per step) x t_ar / t_step."""
    return tokens * ar_seconds / seconds


def select(ctx: Context, knobs: Knobs) -> np.ndarray:
    t, cost = ctx.trees, ctx.cost
    assert cost is not None
    depth = int(t.depth.max(initial=0))
    chains = [chain(t, k) for k in range(depth + 1)]  # chains[0]: the root alone
    accept = [t.selected_accept_len(c) for c in chains]
    count = [t.selected_count(c) for c in chains]
    experts = t.trace.experts_3d()
    ctx_len = t.trace.positions["context_len"].astype(np.int64)
    draft = cost.draft_times(np.arange(depth + 1))  # K draft steps, at most the setting's (0: speculation off)
    m = ctx.shape

    def seconds(k: int, pos: int) -> float:
        rows = np.arange(t.start[pos], t.start[pos] + t.n_nodes[pos])
        rows = rows[chains[k][rows]]
        bits = bitsets.pack_groups(experts, np.zeros(len(rows), dtype=np.int64), 1, m.num_experts, rows=rows)
        n = np.array([count[k][pos]])
        moe = cost.moe_seconds(bits, n)
        return float(moe[0] + cost.other_times(n, ctx_len[pos: pos + 1], speculative=False)[0]) + float(draft[k])

    selected = t.depth == 0

    def take(k: int, pos: int) -> None:
        rows = np.arange(t.start[pos], t.start[pos] + t.n_nodes[pos])
        selected[rows] |= chains[k][rows]

    for _, sl in t.request_slices():
        pos, phase = sl.start, []
        while pos < sl.stop:
            if not phase:  # test each K, then set the best (or off) for SET_STEPS steps
                measured: dict[int, float] = {}
                for k in range(1, depth + 1):
                    got = []
                    for _ in range(TEST_STEPS):
                        if pos >= sl.stop:
                            break
                        take(k, pos)
                        step = min(int(accept[k][pos]) + 1, sl.stop - pos)
                        got.append((step, seconds(k, pos), seconds(0, pos)))
                        pos += step
                    if got:
                        tokens, time, ar = (sum(x) for x in zip(*got))
                        measured[k] = utility(tokens / len(got), time, ar)
                phase = [cascade_choice(measured)] * SET_STEPS
                continue
            k = phase.pop()
            take(k, pos)
            pos += min(int(accept[k][pos]) + 1, sl.stop - pos)
    return selected


POLICY = Policy("cascade", "Cascade: per request, test phases of each chain length and set phases of the best, "
                "or speculation off when the measured utility is below 1.", select=select, priced=True, drafting="stops",
                weight=lambda knobs, pricings: 5.0 + pricings)
