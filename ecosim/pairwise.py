"""numpy's pairwise sum, replayed in compiled code: the same additions in the same order, so the
same float as `x.sum(axis=-1)` over a contiguous last axis.

numpy sums a run of fewer than 8 values one by one from 0, a run of up to 128 with 8 interleaved
accumulators combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) then the leftovers,
and splits a longer run in two at half its length rounded down to a multiple of 8; the reduction
adds the result to 0. A kernel that must give the float a numpy definition gives (a normalised
score that ranks ties, a mean that a test compares bit for bit) sums with `pairwise`.
tests/test_token_kernels.py checks it against numpy for many lengths.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def pairwise_plan(n: int) -> np.ndarray:
    """The sum of n values as a postfix program for `pairwise`: rows (lo, m) sum the block
    [lo, lo + m) (m <= 128), rows (0, -1) add the two sums on top of the stack."""
    plan: list[tuple[int, int]] = []

    def walk(lo: int, m: int) -> None:
        if m <= 128:
            plan.append((lo, m))
            return
        half = m // 2
        half -= half % 8
        walk(lo, half)
        walk(lo + half, m - half)
        plan.append((0, -1))

    walk(0, n)
    return np.array(plan, dtype=np.int64)


@njit(cache=True, inline="always")
def _block(a, lo, n, zero):  # pragma: no cover - compiled
    if n < 8:
        res = zero
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    stop = n - (n % 8)
    while i < stop:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, inline="always")
def pairwise(a, lo, plan, stack):  # pragma: no cover - compiled
    """numpy's sum of a[lo:lo + n], `plan = pairwise_plan(n)`, on a scratch `stack` of a's type
    (len(plan) + 1 entries): what `a[lo:lo + n].sum()` gives."""
    stack[len(stack) - 1] = 0  # a zero of a's type: the last slot is never reached by the plan
    zero = stack[len(stack) - 1]
    top = 0
    for p in range(plan.shape[0]):
        if plan[p, 1] < 0:
            top -= 1
            stack[top - 1] = stack[top - 1] + stack[top]
        else:
            stack[top] = _block(a, lo + plan[p, 0], plan[p, 1], zero)
            top += 1
    return zero + stack[0]
