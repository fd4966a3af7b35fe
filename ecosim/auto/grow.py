"""The growth of `ecospec-auto`'s selections: one compiled loop over every tree (the package's
docstring says what is maximised and why each step is scored at the running rate).

How one step is solved. At a fixed lambda the greedy solution takes nodes while
value(x) - lambda * dt(x | S) >= 0, i.e. while value(x) / dt(x | S) >= lambda. When the marginal
times do not interact, every such greedy solution, for every lambda, is a prefix of one order: the
frontier node of best value per second first. So the step grows in that order and keeps the prefix
of best score. Where marginal times do interact (siblings sharing experts), the prefix scan is
what lets a pair in that neither alone pays for: after the first of two siblings, the second's
experts are already read, its marginal time is one token's compute, it is next in the order, and
the prefix holding both is kept if it beats every shorter one; a greedy step would have stopped at
the first's negative score. The root-only prefix is priced without the draft, so the policy stops
at the root when drafting costs more than it returns at the run's rate.

A frontier node worth less than lambda times the least any node can cost from here on (one more
token with no new expert, the minimum over the cost table's expert counts and the token counts
still to come) is never priced: no selection that holds it scores more than the same selection
without it and its subtree (it cannot make a sibling cheaper by more than it costs itself), and
its descendants, worth no more than it, are no better; so the growth ends as soon as the frontier
holds only such nodes. It never lowers a step's score; without the patience heuristic it changes
no selection, only how soon the growth stops.

Growth stops when even taking every remaining node at no extra time could not beat the best score,
1 + V + V_remaining - lambda t(S) <= best (exact: no node lowers the time), or, a heuristic that
keeps the replay fast, after PATIENCE picks in a row that did not raise the best score of a
drafted prefix (one beyond the root). Counted among drafted prefixes, not against the root's
score: a tree whose value pays for its draft only after many nodes raises its drafted score pick
after pick and is not cut off before it gets there, while a tree whose drafted score has stopped
rising below the root's is (it was grown to its end before, most of a replay's picks on the
DeepSeek-V3.1 bench trace); a pair that pays only together needs one pick; `patience=0` grows
every tree to its end. Ties: the higher `key` (cum_logprob),
then the lower node id, as `confidence` breaks them, so with free experts and raw values the order
is confidence's and the selection is confidence at the budget the running rate prices best.

Assumption (stated wherever the policy is reported): a root-only step does not draft, i.e. the
engine knows whether to draft before drafting, as the oracle bound and Cascade's off state assume.

The per-tree growth is a numba loop over bitsets (one uint64 word per 64 experts per layer), with
each tree's children lists and a compact frontier, so a pick costs the frontier it prices and not
a pass over the tree. With one expert group and a layer time affine in the experts read
(memory-bound layers; checked per pick against the cost table's precomputed step spreads), a
node's price is one popcount over its words, and the layers' time is one line through the total
count, not a table lookup per layer (`bench/replay_throughput.py`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from ecosim.predictors.sets import set_of

PATIENCE = 8  # picks without a better drafted score before the growth gives up (module docstring)


@intrinsic
def _ctpop(typingctx, x):
    """LLVM's ctpop: one popcnt instruction where the CPU has it (numba exposes no popcount)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return x(x), codegen


@njit(cache=True, inline="always")
def _popcount(x: np.uint64) -> np.int64:
    return np.int64(_ctpop(x))


@njit(cache=True, inline="always")
def _pack(ids, r, x, bits):
    """Entry r of the predicted sets: its expert ids -> bitsets in bits[x] (layers, words)."""
    for l in range(ids.shape[1]):
        for w in range(bits.shape[2]):
            bits[x, l, w] = 0
        for j in range(ids.shape[2]):
            e = ids[r, l, j]
            if e >= 0:
                bits[x, l, e >> 6] |= np.uint64(1) << np.uint64(e & 63)


@njit(cache=True, inline="always")
def _at(layer, j, x):
    """layer[:, j] at a fractional count x (linear between neighbours; the last entry beyond the end)."""
    i = int(x)
    top = layer.shape[0] - 1
    if i >= top:
        return layer[top, j]
    f = x - i
    return layer[i, j] if f == 0.0 else layer[i, j] + f * (layer[i + 1, j] - layer[i, j])


@njit(cache=True, inline="always")
def _layers_time(layer, u, tok):
    """Seconds of every MoE layer at `tok` tokens: each waits for its slowest group (u (layers, groups) counts)."""
    total = 0.0
    for l in range(u.shape[0]):
        m = 0.0
        for d in range(u.shape[1]):
            m = max(m, layer[u[l, d], tok])
        total += m
    return total


@njit(cache=True)
def grow(trees, start, n_nodes, parent, value, key, ids, devmask, layer, steps, other, draft, copy, resident, order, best_k,
         patience=0, end=None, accepted=None, depth=None, rate=None, beta=None, fold=None, index=None):
    """Grow every tree in value-per-second order; write each row's pick step to `order` (-1 roots,
    n for rows never picked) and each tree's best prefix length to `best_k`.

    trees: the trees to grow; start, n_nodes (all trees) first row and size of each; parent (rows,)
    local parent id; value, key (rows,); ids (sets, layers, m) predicted expert sets (-1 pads), row r's
    set ids[index[r]] (`index` None: ids[r]; predictors/sets.py),
    packed tree by tree into bitsets (one uint64 word per 64 experts); devmask (devices, words);
    layer (u + 1, tokens + 2) seconds and steps = marginal.layer_steps(layer); other (all trees, tokens + 2) seconds; resident
    (len(trees), layers, words) offload cache bits, or (0, layers, words) without a cache;
    `patience` > 0 stops a tree's growth after that many picks in a row without a better drafted
    score (see the module docstring); `rate` (2,) the running (expected tokens, seconds) of the
    steps chosen so far, read for the exchange rate and added to (None: each tree at its plain
    rate); `beta` (folds, ranks) and `fold` (trees,) scale the predicted new experts of a tree's
    k-th pick by beta[fold[tree], k] (union_scale.py; None: 1).

    Given `end` (trees,) the tree after each one's request, `accepted` and `depth` (rows,), `trees`
    must be every tree in order and only those a request visits are grown (it steps from p to
    p + accepted + 1); the others keep the root alone, which no figure of a replay reads.
    """
    L, W = ids.shape[1], devmask.shape[1]
    D = devmask.shape[0]
    has_cache = resident.shape[0] > 0
    buf = np.zeros((L, W), dtype=np.uint64)
    u = np.zeros((L, D), dtype=np.int64)
    base_next = np.zeros(L)
    n_max = 1
    for i in range(len(trees)):
        n_max = max(n_max, n_nodes[trees[i]])
    bits = np.zeros((n_max, L, W), dtype=np.uint64)  # one tree's bitsets, reused
    spread_lo, spread_hi, token_min = steps
    first_child = np.zeros(n_max, dtype=np.int64)  # a tree's children lists (0: none) ...
    next_sib = np.zeros(n_max, dtype=np.int64)
    fr = np.zeros(n_max, dtype=np.int64)  # ... and its frontier, in no order
    E1 = layer.shape[0]
    LW = L * W
    bits_flat, buf_flat = bits.reshape(n_max, LW), buf.reshape(LW)  # views: a node's words in one run
    res_flat = resident.reshape(resident.shape[0], LW)
    slope = 0.0
    T = min(layer.shape[1], other.shape[1])
    tail = np.zeros(T)
    i = 0
    while i < len(trees):
        tree = trees[i]
        s0, n = start[tree], n_nodes[tree]
        _pack(ids, set_of(index, s0), 0, bits)  # the others are packed when they first reach the frontier
        t = i
        s = 0  # rows of this tree in `bits` are 0..n-1; in the trace s0..s0+n-1
        order[s0] = -1
        for l in range(L):
            for w in range(W):
                buf[l, w] = bits[s, l, w]
            for d in range(D):
                c = 0
                for w in range(W):
                    c += _popcount(buf[l, w] & devmask[d, w])
                u[l, d] = c
        miss = 0
        if has_cache:
            for l in range(L):
                for w in range(W):
                    miss += _popcount(buf[l, w] & ~resident[t, l, w])
        tok = 1
        layers_now = _layers_time(layer, u, tok)
        t0 = layers_now + copy * miss + other[tree, tok]
        tail[T - 1] = np.inf  # tail[k]: the least one more token costs from k tokens on
        for j in range(T - 2, -1, -1):
            tail[j] = min(tail[j + 1], other[tree, j + 1] - other[tree, j] + L * token_min[j])
        lam = rate[0] / rate[1] if rate is not None and rate[1] > 0.0 else 1.0 / t0
        best_score = 1.0 - lam * t0
        best = 0
        best_v, best_t = 0.0, t0
        time = t0 + draft
        v_sum = 0.0
        v_rest = 0.0
        nf = 0
        first_child[:n] = 0
        for x in range(n - 1, 0, -1):  # children lists in id order (a child's id is above its parent's)
            order[s0 + x] = n
            v_rest += value[s0 + x]
            pa = parent[s0 + x]
            next_sib[x] = first_child[pa]
            first_child[pa] = x
        x = first_child[0]
        while x > 0:
            fr[nf] = x
            nf += 1
            _pack(ids, set_of(index, s0 + x), x, bits)
            x = next_sib[x]
        drafted_score, drafted = -np.inf, 0  # the best prefix beyond the root so far, and its length
        for k in range(1, n):
            if 1.0 + v_sum + v_rest - lam * time <= best_score or (patience > 0 and drafted > 0 and k - drafted > patience):
                break
            if D > 1:
                for l in range(L):
                    m = 0.0
                    for d in range(D):
                        m = max(m, layer[u[l, d], tok + 1])
                    base_next[l] = m
            fixed = other[tree, tok + 1] - other[tree, tok] - layers_now
            floor = tail[tok]  # the least any further node can cost: one more token, no new expert
            # One group and F(., tok + 1) affine from the emptiest layer's count up (memory-bound
            # layers: each expert costs the same): a node's time is the layers' time now plus one
            # slope per new expert, so one count over all its words replaces a lookup per layer.
            affine = False
            j1 = tok + 1
            if D == 1:
                lo, total = E1 - 1, 0
                for l in range(L):
                    lo = min(lo, u[l, 0])
                    total += u[l, 0]
                if lo + 1 < E1:
                    slope = layer[lo + 1, j1] - layer[lo, j1]
                    affine = slope > 0.0 and max(spread_hi[lo, j1] - slope, slope - spread_lo[lo, j1]) <= 1e-12 * slope
                if affine:  # every layer on the line through F(lo, j1): their sum from the total count
                    layers_next = L * layer[lo, j1] + slope * (total - L * lo)
                else:
                    layers_next = 0.0
                    for l in range(L):
                        layers_next += layer[u[l, 0], j1]
            b = beta[fold[tree], min(tok, beta.shape[1] - 1)] if beta is not None else 1.0  # this pick's rank: tok
            pick, pick_dt, pick_ratio, pick_f = -1, 0.0, -1.0, -1
            for f in range(nf):
                x = fr[f]
                if value[s0 + x] < lam * floor:
                    continue  # worth less than its token's time even with free experts: so is its subtree
                r = s + x
                dt = fixed
                if affine:
                    c = 0
                    for q in range(LW):
                        c += _popcount(bits_flat[r, q] & ~buf_flat[q])
                    dt += layers_next + slope * b * c
                    if has_cache and c > 0:
                        c = 0
                        for q in range(LW):
                            c += _popcount(bits_flat[r, q] & ~buf_flat[q] & ~res_flat[t, q])
                        dt += copy * c
                    L_loop = 0
                else:
                    L_loop = L
                for l in range(L_loop):
                    if D == 1:  # one group: F at the grown count (no new expert: the count now)
                        c = 0
                        for w in range(W):
                            c += _popcount(bits[r, l, w] & ~buf[l, w])
                        dt += _at(layer, j1, u[l, 0] + b * c)
                        if has_cache and c > 0:
                            for w in range(W):
                                dt += copy * _popcount(bits[r, l, w] & ~buf[l, w] & ~resident[t, l, w])
                        continue
                    new = False
                    for w in range(W):
                        if bits[r, l, w] & ~buf[l, w]:
                            new = True
                    if not new:
                        dt += base_next[l]
                        continue
                    m = 0.0
                    for d in range(D):
                        c = 0
                        for w in range(W):
                            c += _popcount(bits[r, l, w] & ~buf[l, w] & devmask[d, w])
                        m = max(m, _at(layer, j1, u[l, d] + b * c))
                    dt += m
                    if has_cache:
                        for w in range(W):
                            dt += copy * _popcount(bits[r, l, w] & ~buf[l, w] & ~resident[t, l, w])
                ratio = value[s0 + x] / max(dt, 1e-18)
                if (pick < 0 or ratio > pick_ratio or (ratio == pick_ratio and (key[s0 + x] > key[s0 + pick] or (
                        key[s0 + x] == key[s0 + pick] and x < pick)))):  # equal keys: the lower id
                    pick, pick_dt, pick_ratio, pick_f = x, dt, ratio, f
            if pick < 0:
                break
            r = s + pick
            added = 0
            if D == 1:  # one group holds every expert
                for l in range(L):
                    c = 0
                    for w in range(W):
                        c += _popcount(bits[r, l, w] & ~buf[l, w])
                        buf[l, w] |= bits[r, l, w]
                    u[l, 0] += c
                    added += c
            else:
                for l in range(L):
                    for d in range(D):
                        c = 0
                        for w in range(W):
                            c += _popcount(bits[r, l, w] & ~buf[l, w] & devmask[d, w])
                        u[l, d] += c
                        added += c
                    for w in range(W):
                        buf[l, w] |= bits[r, l, w]
            tok += 1
            if affine:  # the counts stay on the same line: the layers' time now is one step up it
                layers_now = layers_next + slope * added
            else:
                layers_now = _layers_time(layer, u, tok)
            time += pick_dt
            v_sum += value[s0 + pick]
            v_rest -= value[s0 + pick]
            order[s0 + pick] = k - 1
            nf -= 1
            fr[pick_f] = fr[nf]
            x = first_child[pick]
            while x > 0:
                fr[nf] = x
                nf += 1
                _pack(ids, set_of(index, s0 + x), x, bits)
                x = next_sib[x]
            score = 1.0 + v_sum - lam * time
            if score > drafted_score:
                drafted_score, drafted = score, k
            if score > best_score:
                best_score, best, best_v, best_t = score, k, v_sum, time
        best_k[tree] = best
        if rate is not None:
            rate[0] += 1.0 + best_v
            rate[1] += best_t
        if end is None:
            i += 1
            continue
        for x in range(1, n):  # the trees this one's request skips are never verified
            if order[s0 + x] >= best:
                order[s0 + x] = n
        acc = 0
        for x in range(n):
            if order[s0 + x] < best and accepted[s0 + x]:
                acc = max(acc, depth[s0 + x])
        nxt = min(tree + acc + 1, end[tree])
        for j in range(tree + 1, nxt):
            order[start[j]] = -1
            for x in range(1, n_nodes[j]):
                order[start[j] + x] = n_nodes[j]
        i = nxt
