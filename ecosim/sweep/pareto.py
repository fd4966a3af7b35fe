"""The Pareto front of a sweep: time per token against experts loaded per step.

Per (hardware, hbm_bw, placement), over the totals of every configuration that has a row for each
trace (the `oracle` bound excluded, `ar` included): a configuration is on the front when no other
one is at least as good on both figures and better on one. Both figures are minimised; time per
token is what a user waits, experts per step is the HBM traffic (and the room left for batching).
The front is listed by increasing experts per step; of identical points the first in grid order.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ecosim.policies import registry
from ecosim.sweep.winner import PRICING, figures, knob_columns, totals


def front(df: pl.DataFrame, traces: list[str]) -> list[dict[str, Any]]:
    """The front of each pricing, as flat records (pricing, knobs, figures), grid order of pricings."""
    by_pricing: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for g in totals(df, traces):
        if g["policy"] != registry.bound().name:
            by_pricing.setdefault(tuple(g[k] for k in PRICING), []).append(g)
    out = []
    for groups in by_pricing.values():
        pts = [(g["total"].time_per_token_s, g["total"].experts_per_step) for g in groups]
        best = float("inf")
        for i in sorted(range(len(pts)), key=lambda i: (pts[i][1], pts[i][0], i)):
            if pts[i][0] < best:  # faster than everything with no more experts per step
                best = pts[i][0]
                g = groups[i]
                out.append({**{k: g[k] for k in PRICING + knob_columns()}, **figures(g["total"])})
    return out

