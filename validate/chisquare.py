"""Pearson's chi-square test of homogeneity for two samples of categories (no scipy needed).

Two arms drew n_A and n_B samples; O_{a,c} counts category c in arm a. Under the hypothesis that both arms draw
from one distribution, the expected count is E_{a,c} = n_a (O_{A,c} + O_{B,c}) / (n_A + n_B) and

    X^2 = sum over a in {A, B}, c of (O_{a,c} - E_{a,c})^2 / E_{a,c}                                   (1)

is asymptotically chi-square with C - 1 degrees of freedom (a 2 x C contingency table). The approximation wants
expected counts of about 5 or more, so categories seen fewer than `min_count` times over both arms are pooled into
one. The p-value is the chi-square survival function, in closed form for integer degrees of freedom k:

    k even:  Q = exp(-x/2) sum_{i < k/2} (x/2)^i / i!                                                  (2)
    k odd:   Q = erfc(sqrt(x/2)) + exp(-x/2) sum_{r = 1}^{(k-1)/2} x^{r - 1/2} / (1 * 3 * ... * (2r - 1)) * sqrt(2/pi)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

OTHER = "(pooled)"


@dataclass(frozen=True)
class Homogeneity:
    statistic: float
    dof: int
    p_value: float
    categories: int  # after pooling
    pooled: int  # samples (both arms) in the pooled category


def chi2_sf(x: float, dof: int) -> float:
    """P(chi-square with `dof` degrees of freedom > x): equation (2), terms summed in log space."""
    if dof < 1:
        raise ValueError("dof must be at least 1")
    if x <= 0.0:
        return 1.0
    half = x / 2.0
    if dof % 2 == 0:
        terms = (math.exp(-half + i * math.log(half) - math.lgamma(i + 1)) for i in range(dof // 2))
        return min(1.0, sum(terms))
    total = math.erfc(math.sqrt(half))
    log_term = -half + 0.5 * math.log(x) + 0.5 * math.log(2.0 / math.pi)  # r = 1: sqrt(2/pi) e^{-x/2} x^{1/2} / 1
    for r in range(1, (dof - 1) // 2 + 1):
        if r > 1:
            log_term += math.log(x) - math.log(2 * r - 1)
        total += math.exp(log_term)
    return min(1.0, total)


def homogeneity(a: Counter[Hashable], b: Counter[Hashable], min_count: int = 5) -> Homogeneity:
    """Equation (1) on two histograms, rare categories pooled; p = 1 when fewer than two categories remain."""
    keep: dict[Hashable, tuple[int, int]] = {}
    pa = pb = 0
    for c in set(a) | set(b):
        if a[c] + b[c] >= min_count:
            keep[c] = (a[c], b[c])
        else:
            pa, pb = pa + a[c], pb + b[c]
    if pa + pb:
        keep[OTHER] = (pa, pb)
    na, nb = sum(v[0] for v in keep.values()), sum(v[1] for v in keep.values())
    if len(keep) < 2 or na == 0 or nb == 0:
        return Homogeneity(0.0, 0, 1.0, len(keep), pa + pb)
    n = na + nb
    x = 0.0
    for oa, ob in keep.values():
        ea, eb = na * (oa + ob) / n, nb * (oa + ob) / n
        x += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
    dof = len(keep) - 1
    return Homogeneity(x, dof, chi2_sf(x, dof), len(keep), pa + pb)
