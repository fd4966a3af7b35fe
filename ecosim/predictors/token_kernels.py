"""Compiled kernels of the `token` table: its fit and its top-k sets without a dense (tokens x
layers x experts) block.

Both give exactly what the numpy definitions in token.py give (tests/test_token_kernels.py compares
them on random tables); they only skip the work that cannot change the answer:

- `count_top`: a token's counts touch at most (its rows x top-k) experts of a layer, so the
  `width` most counted are found among those, and the zero-count slots that pad a short list are
  the lowest untouched ids (what `top_ids` gives a tie: the lower index first).
- `pick_top_k`: the score `s_t[l, e] = (c_t[l, e] / k + alpha p[l, e]) / (n_t + alpha)`, normalised
  over the layer, ranks an expert the table does not list by its prior alone (rounding may only
  merge neighbours into ties, which go to the lower id). Walking the unlisted experts in prior
  order, the k-th one's score bounds every later one's, so the top k are among the listed ones,
  the first k unlisted ones and those tied with the k-th. The normalising sum is numpy's own
  pairwise float32 sum (ecosim/pairwise.py), so every score is the float numpy computes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ecosim.pairwise import pairwise


@njit(cache=True)
def _keep_best(best_v, best_e, have, width, v, e):  # pragma: no cover - compiled
    """Insert (v, e) into the first `have` entries of a list kept by value descending, then id
    ascending, of at most `width`; returns its new length (an entry that ranks below a full list's
    last is dropped)."""
    if have == width and not (v > best_v[width - 1] or (v == best_v[width - 1] and e < best_e[width - 1])):
        return have
    m = have - 1 if have < width else width - 2
    while m >= 0 and (best_v[m] < v or (best_v[m] == v and best_e[m] > e)):
        best_v[m + 1] = best_v[m]
        best_e[m + 1] = best_e[m]
        m -= 1
    best_v[m + 1] = v
    best_e[m + 1] = e
    return have + 1 if have < width else have


@njit(cache=True)
def count_top(order, bounds, experts, num_experts, width):  # pragma: no cover - compiled
    """Per (token, layer), the `width` experts of most top-k slots among the rows `order[bounds[t]:
    bounds[t + 1]]` (count descending, then id ascending; zero-count ids ascending pad the list)
    and their counts: what a dense bincount followed by `top_ids(block, width)` gives. Also the
    (layers, experts) slot counts of all the rows (the prior's)."""
    T = len(bounds) - 1
    _, L, k = experts.shape
    ids = np.zeros((T, L, width), dtype=np.int16)
    counts = np.zeros((T, L, width), dtype=np.float32)
    total = np.zeros((L, num_experts), dtype=np.int64)
    cnt = np.zeros((L, num_experts), dtype=np.int64)
    touched = np.empty((L, num_experts), dtype=np.int64)
    n_touched = np.zeros(L, dtype=np.int64)
    best_c = np.empty(width, dtype=np.int64)
    best_e = np.empty(width, dtype=np.int64)
    for t in range(T):
        for i in range(bounds[t], bounds[t + 1]):
            r = order[i]
            for layer in range(L):
                for s in range(k):
                    e = experts[r, layer, s]
                    if e >= 0:
                        if cnt[layer, e] == 0:
                            touched[layer, n_touched[layer]] = e
                            n_touched[layer] += 1
                        cnt[layer, e] += 1
        for layer in range(L):
            have = 0
            for j in range(n_touched[layer]):
                e = touched[layer, j]
                c = cnt[layer, e]
                total[layer, e] += c
                have = _keep_best(best_c, best_e, have, width, c, e)
            e = 0
            while have < width:  # pad with the lowest untouched ids (count 0)
                if cnt[layer, e] == 0:
                    best_c[have] = 0
                    best_e[have] = e
                    have += 1
                e += 1
            for j in range(width):
                ids[t, layer, j] = best_e[j]
                counts[t, layer, j] = np.float32(best_c[j])
            for j in range(n_touched[layer]):
                cnt[layer, touched[layer, j]] = 0
            n_touched[layer] = 0
    return ids, counts, total


@njit(cache=True)
def pick_top_k(idx, n, ids, counts, prior, prior_order, plan, alpha, top_k, k):  # pragma: no cover - compiled
    """(len(idx), L, k) int16: per table row `idx` (-1: an unseen token, the prior alone) and
    layer, the k experts of highest normalised score (ties to the lower id), best first: what
    `top_ids(TokenTable.scores_of(idx), k)` gives. `prior_order[l]` is layer l's experts by prior
    descending, ties by id ascending."""
    L, E = prior.shape
    W = ids.shape[2]
    out = np.empty((len(idx), L, k), dtype=np.int16)
    x = np.empty(E, dtype=np.float32)
    listed = np.zeros(E, dtype=np.bool_)
    cand_e = np.empty(W + E, dtype=np.int64)
    best_v = np.empty(k, dtype=np.float32)
    best_e = np.empty(k, dtype=np.int64)
    stack = np.empty(plan.shape[0] + 1, dtype=np.float32)
    a32 = np.float32(alpha)
    kk = np.float32(top_k)
    for r in range(len(idx)):
        j = idx[r]
        seen = j >= 0
        n_t = n[j] if seen else np.float32(0.0)
        denom = n_t + a32
        c1 = a32 / denom
        kd = kk * denom
        for layer in range(L):
            for e in range(E):
                x[e] = prior[layer, e] * c1
            n_cand = 0
            if seen:
                for w in range(W):
                    e = ids[j, layer, w]
                    x[e] = x[e] + counts[j, layer, w] / kd
                    listed[e] = True
                    cand_e[n_cand] = e
                    n_cand += 1
            s = pairwise(x, 0, plan, stack)
            taken = 0
            kth = np.float32(0.0)
            for q in range(E):  # unlisted experts in prior order: their scores never rise
                e = prior_order[layer, q]
                if listed[e]:
                    continue
                v = x[e] / s
                if taken >= k and v < kth:
                    break
                cand_e[n_cand] = e
                n_cand += 1
                taken += 1
                if taken == k:
                    kth = v
            have = 0
            for c in range(n_cand):
                e = cand_e[c]
                v = x[e] / s
                have = _keep_best(best_v, best_e, have, k, v, e)
            for c in range(k):
                out[r, layer, c] = best_e[c]
            if seen:
                for w in range(W):
                    listed[ids[j, layer, w]] = False
    return out


@njit(cache=True)
def slot_counts(experts, rows, num_experts):  # pragma: no cover - compiled
    """(layers, experts) top-k slots each expert takes over the rows `rows` (pads skipped): the prior's counts."""
    _, L, k = experts.shape
    out = np.zeros((L, num_experts), dtype=np.int64)
    for r in rows:
        for layer in range(L):
            for s in range(k):
                e = experts[r, layer, s]
                if e >= 0:
                    out[layer, e] += 1
    return out
