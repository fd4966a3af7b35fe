"""`ecospec-auto` (also `ecospec --lambda auto`): the selections of greatest expected tokens
per second over the run, each step scored at the running rate, (1 + E[accepted]) - lambda t_step,
with calibrated values and costs in seconds (ecosim/auto: why Dinkelbach's
theorem makes this the throughput optimum; marginal.py the pricing; acceptance.py the values;
union_scale.py the predicted experts' correction). No knob to sweep: the predictor and the kind
of value only.

Under offload the cache state a step sees depends on the steps before it, so the trees a request
visits are selected one at a time along its own trajectory, each with the cache as the previous
steps left it. Either way only the trees the requests visit are grown: the others keep the root
alone (never verified). It decides before drafting (`drafting="before"`): a root-only step drafts nothing.
"""

from __future__ import annotations

import numpy as np

from ecosim import bitsets
from ecosim.acceptance import calibrate, node_values
from ecosim.auto import auto_order, auto_select
from ecosim.marginal import StepPricer
from ecosim.union_scale import union_scale
from ecosim.policies.base import Context, Knobs, Policy
from ecosim.policies.knobs import PREDICTOR, VALUE


def values(ctx: Context, kind: str) -> np.ndarray:
    """A node's value: calibrated (fitted once per trace) or raw exp(cum_logprob)."""
    cal = ctx.memo(("acceptance",), lambda: calibrate(ctx.trees)) if kind == "calibrated" else None
    return node_values(ctx.trees, kind, cal)


def pricing_key(ctx: Context) -> tuple:
    """What a per-trace table priced by the cost model is kept under (beside its own name)."""
    c = ctx.cost
    assert c is not None
    return (c.model, c.device, c.placement, c.config, c.tree_depth, c.draft)


def pricer(ctx: Context) -> StepPricer:
    c = ctx.cost
    assert c is not None
    return ctx.memo(("pricer", *pricing_key(ctx)), lambda: StepPricer.of(c, int(ctx.trees.n_nodes.max(initial=1))))


def other(ctx: Context) -> np.ndarray:
    """(trees, nodes + 2) seconds outside the routed experts by tokens verified: once per trace and pricing."""
    t = ctx.trees
    return ctx.memo(("auto other", *pricing_key(ctx)), lambda: pricer(ctx).other(
        t.trace.positions["context_len"].astype(np.int64), int(t.n_nodes.max(initial=1))))


def _pack_bool(table: np.ndarray, num_experts: int) -> np.ndarray:
    """(layers, experts) bool -> (layers, words) uint64 bitsets (bitsets.py's bit order)."""
    words = bitsets.n_words(num_experts)
    padded = np.zeros((table.shape[0], words * 64), dtype=bool)
    padded[:, : table.shape[1]] = table
    return np.packbits(padded, axis=1, bitorder="little").view("<u8").astype(np.uint64)


def select(ctx: Context, knobs: Knobs) -> np.ndarray:
    t, cost = ctx.trees, ctx.cost
    assert cost is not None
    pred, value, p, o = ctx.predicted(knobs["predictor"]), values(ctx, knobs["value"]), pricer(ctx), other(ctx)
    ctx_len = t.trace.positions["context_len"]
    scale = ctx.memo(("union scale", knobs["predictor"]), lambda: union_scale(t, pred)[:2])
    if not cost.placement.stateful:
        # a live caller (validate run), selecting one step at a time, carries the running rate from
        # step to step in ("running rate",); over a whole trace it starts at zero here
        rate = ctx.memo(("running rate",), lambda: None)
        return auto_select(t, *auto_order(t, pred, value, p, ctx_len, visited_only=True, other=o, scale=scale, rate=rate))
    m, place = ctx.shape, cost.placement
    cache = place.cache(m)
    assert cache is not None
    selected = t.depth == 0
    experts = t.trace.experts_3d()
    out = np.full(t.n_rows, -1, dtype=np.int64), np.zeros(t.n_trees, dtype=np.int64)  # reused, tree by tree
    one = np.zeros(1, dtype=np.int64)
    rate = np.zeros(2)  # the exchange rate carried along every request's trajectory (ecosim/auto)
    for _, sl in t.request_slices():
        pos = sl.start
        while pos < sl.stop:
            resident = _pack_bool(cache.resident, m.num_experts)[None]
            one[0] = pos
            order, best_k = auto_order(t, pred, value, p, ctx_len, resident=resident, only=one, other=o, out=out, rate=rate, scale=scale)
            a, n = int(t.start[pos]), int(t.n_nodes[pos])
            o_rows, d_rows = order[a : a + n], t.depth[a : a + n]
            pick = (d_rows == 0) | ((o_rows >= 0) & (o_rows < best_k[pos]))
            selected[a : a + n] = pick
            rows = np.flatnonzero(pick) + a
            cache.access(bitsets.pack_groups(experts, np.zeros(len(rows), dtype=np.int64), 1, m.num_experts, rows=rows)[0])
            hit = pick & t.accepted[a : a + n]
            pos += int(d_rows[hit].max(initial=0)) + 1
    return selected


POLICY = Policy("ecospec-auto", "Per step, the subtree of most expected tokens per second at the run's own "
                "running rate: calibrated acceptance, cost in seconds, no lambda to tune (ecosim/auto).",
                knobs=(PREDICTOR, VALUE), select=select, priced=True, drafting="before", weight=lambda knobs, pricings: 10.0 + pricings)
