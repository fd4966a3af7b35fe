"""Carry a routing fit from one MoE shape to another: the target moments scaled by shape.

Real routing is at hand for one model only (gpt-oss-20b: 32 experts, top-4). The other catalogue
shapes' presets are fitted with the same procedure (calibrate.fit, on the same real token streams)
to gpt-oss-20b's moments *scaled to their shape*, by one rule:

**Effective tokens.** A window of n consecutive tokens that touches D(n) distinct experts of a layer
behaves like n_eff(n) tokens routed independently and uniformly, the number that touches as many
on average:

    D(n) = E (1 - (1 - k/E)^n_eff)      so      n_eff(n) = log(1 - D(n)/E) / log(1 - k/E)

(E experts, top-k). A scaled shape keeps gpt-oss-20b's n_eff(n) at every n = 2..64, so its curve is
D'(n) = E' (1 - (1 - k'/E')^n_eff(n)). Where E/k is large this keeps the working set of a window
the same multiple of k (gpt-oss-20b: about 2.3 k in 4 tokens, 5.4 k in 64) whatever E is; where E is
small (Mixtral: 8 experts, top-2) the curve saturates at E instead of exceeding it. The rule is the
identity for gpt-oss-20b's own shape, and for any shape with its E and k.

Why this rule and not "the same fraction of E": Liang et al., "Not All Models Suit Expert
Offloading" (https://arxiv.org/abs/2505.16056), measuring 20 MoE models, find that most of them
reach a good segment-cache hit rate with a cache of about twice the active experts, whatever the
number of experts: locality is a matter of the active experts, which is what keeping n_eff does.
That is a qualitative support only; the paper gives no figure this rule reproduces. The same paper
finds shared experts lower local routing consistency: DeepSeek-V3.1 has one, so its scaled preset is
probably more local than the real model (not adjusted: there is no figure to adjust by).

The other moments are kept as they are: neighbour overlap follows from D'(2) (a pair of neighbours
touches 2k - shared experts, so overlap' = 2 - D'(2)/k'); token recall@k (how much the token alone
says, a property of the corpus and the model's token specialisation); and the busiest expert's
share over the fair share k/E (load balancing is trained towards the fair share, in any shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ecosim.catalog.models import ModelShape
from ecosim.routing.generator import RoutingKnobs

RULE = "effective tokens: n_eff(n) of gpt-oss-20b kept at every window n (ecosim/routing/scale.py)"


@dataclass(frozen=True)
class RoutingShape:
    """What routing statistics depend on in a model: experts, top-k, DeepSeek-style group limits."""

    num_experts: int
    top_k: int
    n_group: int = 0
    topk_group: int = 0

    @classmethod
    def of(cls, model: ModelShape) -> RoutingShape:
        n_group, topk_group = model.group_limits
        return cls(model.num_experts, model.top_k, n_group, topk_group)

    def describe(self) -> str:
        g = f", group-limited ({self.topk_group} of {self.n_group} groups)" if self.n_group else ""
        return f"{self.num_experts} experts, top-{self.top_k}{g}"


def effective_tokens(distinct: float, num_experts: int, top_k: int) -> float:
    """n_eff: the independent, uniformly routed tokens that touch `distinct` experts on average."""
    if top_k >= num_experts:
        return 1.0
    d = min(max(distinct, top_k), num_experts * (1 - 1e-9))
    return math.log(1 - d / num_experts) / math.log(1 - top_k / num_experts)


def distinct_of(n_eff: float, num_experts: int, top_k: int) -> float:
    """Distinct experts touched by n_eff independent, uniformly routed tokens (the inverse)."""
    if top_k >= num_experts:
        return float(num_experts)
    return num_experts * (1 - (1 - top_k / num_experts) ** n_eff)


def scale_distinct(distinct: float, base: RoutingShape, to: RoutingShape) -> float:
    """One point of the window curve carried from `base` to `to` (n_eff kept)."""
    if (base.num_experts, base.top_k) == (to.num_experts, to.top_k):
        return distinct
    return distinct_of(effective_tokens(distinct, base.num_experts, base.top_k), to.num_experts, to.top_k)


def scale_moments(m: dict[str, Any], base: RoutingShape, to: RoutingShape) -> dict[str, Any]:
    """calibrate.moments of `base`'s routing as they would read for shape `to` under the rule above."""
    out = dict(m)
    out["window_distinct"] = {n: scale_distinct(v, base, to) for n, v in m["window_distinct"].items()}
    out["window_curve"] = [scale_distinct(v, base, to) if v == v else v for v in m["window_curve"]]
    d2 = out["window_distinct"].get(2, out["window_curve"][0])
    out["neighbour_overlap"] = 2 - d2 / to.top_k if (base.num_experts, base.top_k) != (to.num_experts, to.top_k) \
        else m["neighbour_overlap"]
    return out


def scaled_start(knobs: RoutingKnobs, base: RoutingShape, to: RoutingShape) -> RoutingKnobs:
    """Where a scaled fit starts: the base fit's knobs, the context's support kept at the same
    multiple of top-k (its share of the experts scaled by (E/k) / (E'/k')), clipped into (0.05, 1]."""
    share = knobs.context_share * (base.num_experts / base.top_k) / (to.num_experts / to.top_k)
    return replace(knobs, context_share=min(1.0, max(0.05, share)) if knobs.context_share > 0 else 0.0)
