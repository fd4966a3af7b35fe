"""The bound on every selection policy over the recorded candidates.

From position p a step can at best verify the true accepted chain cut at some a <= A(p) and
advance a + 1. Any policy's step at p that accepts a tokens verified a superset of that chain,
and the step cost grows with what is verified (union, tokens), so a shortest path over positions
under the same cost model is a lower bound on any policy's total time:

    T(n) = 0,   T(p) = min over a in [0, min(A(p), n - p - 1)] of  c(p, a) + T(p + a + 1)

c(p, 0) is a plain decoding step (no draft needed). Under offload the cache state depends on the
path, so there the bound prices every expert as a cache hit (still a lower bound, and looser).
"""

from __future__ import annotations

import numpy as np


def shortest_path(costs: np.ndarray, reach: np.ndarray) -> tuple[float, np.ndarray]:
    """Minimum total time over one request's positions and the chosen cut at each step taken.

    `costs` is (positions, cuts) seconds of verifying the chain cut at a; `reach[p]` = A(p).
    Returns (total, cuts): cuts[i] is the a taken at the i-th step along the optimal path.
    """
    n = len(reach)
    best = np.zeros(n + 1)
    choice = np.zeros(n, dtype=np.int64)
    for p in range(n - 1, -1, -1):
        top = min(int(reach[p]), n - p - 1)
        options = costs[p, : top + 1] + best[p + 1 : p + top + 2]
        a = int(np.argmin(options))
        choice[p], best[p] = a, options[a]
    path = []
    p = 0
    while p < n:
        path.append(choice[p])
        p += choice[p] + 1
    return float(best[0]), np.array(path, dtype=np.int64)
