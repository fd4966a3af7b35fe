"""A latent-state routing generator whose knobs can be fitted to real routing (calibrate.py).

Per MoE layer, a node's router scores every expert e and keeps the top-k (its gates: the softmax
of the kept scores). With t = `token_affinity`, p = `parent_affinity`, c = `context`, s = `skew`:

    score(e) = t * HOME * [e in home(token, layer)]                 the token's own experts
             + p * STICK * [e in experts of the previous token]     locality along the path
             + (1 - t - p) * (s * log zipf(e) + c * G_ctx(request, layer, e) + Gumbel)

`home` is k experts hashed from the token (drawn by popularity), so a token keeps its experts
across contexts; the previous token is the parent node (for a root, the previous root), so a
child inherits from its context and siblings share it; G_ctx is a per-request Gumbel vector,
the slowly varying "topic" that keeps a sequence on a subset of the experts; zipf is the
layer's popularity (exponent s over a random order of the experts). t = 1 routes by the token
alone, t = p = 0 with s = c = 0 uniformly at random.

Group-limited routing (DeepSeek-V3, `n_group`, `topk_group`): the groups are ranked by the sum
of their two best scores, all but the best `topk_group` masked, then the top-k taken.

Same token in the same context routes identically: every node has a path hash (request, then
each token from the first root on); a node whose hash equals a root's or a shallower node's
takes that node's experts and gates exactly (the accepted child at p is the root at p + 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ecosim.catalog.shape import group_limit_problem
from ecosim.errors import EcoSimError

HOME = 3.0
STICK = 3.0
CHUNK_FLOATS = 1 << 22
MIX = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class RoutingKnobs:
    token_affinity: float = 0.5
    parent_affinity: float = 0.3
    context: float = 0.0
    skew: float = 1.0
    context_share: float = 0.0  # > 0: the context favours this share of the experts equally (a support), else graded
    n_group: int = 0  # DeepSeek-V3 group-limited routing: groups of experts (0 = off)
    topk_group: int = 0  # groups a token may use


def splitmix(x: np.ndarray) -> np.ndarray:
    """64-bit mixing (splitmix64 finaliser), vectorised; wraps around by design."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + MIX) & np.uint64(0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def path_hash(parent_hash: np.ndarray, token: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return splitmix(parent_hash * np.uint64(31) + token.astype(np.int64).astype(np.uint64))


class Router:
    """The generator for one model shape and one set of knobs (seeded)."""

    def __init__(self, layers: int, num_experts: int, top_k: int, knobs: RoutingKnobs, requests: int, seed: int):
        self.L, self.E, self.k, self.knobs = layers, num_experts, top_k, knobs
        rng = np.random.default_rng([seed, 0x5EED])
        self.rng = rng
        order = np.stack([rng.permutation(num_experts) for _ in range(layers)])
        rank = np.argsort(order, axis=1)  # rank of each expert in the layer's popularity order
        self.log_pop = (-knobs.skew * np.log1p(rank)).astype(np.float32)  # (L, E)
        w = np.exp(self.log_pop.astype(np.float64))
        self.cdf = np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1)
        g = rng.gumbel(size=(requests, layers, num_experts))
        if knobs.context_share > 0:  # a request's preferred support: its top share of experts by g
            m = max(1, int(round(knobs.context_share * num_experts)))
            g = (np.argsort(np.argsort(-g, axis=-1), axis=-1) < m).astype(np.float64)
        self.ctx = (knobs.context * g).astype(np.float32)
        self.salt = np.uint64(rng.integers(1, 2**62))
        why = group_limit_problem(knobs.n_group, knobs.topk_group, num_experts, top_k)
        if why:
            raise EcoSimError(why)

    def set_context(self, experts: list[np.ndarray]) -> None:
        """Each request's context from its real routing ((len, L, k) per request): its support is
        the experts it uses most (graded by log-frequency when `context_share` is 0)."""
        kn = self.knobs
        counts = np.stack([np.stack([np.bincount(e[:, layer].ravel().astype(np.int64), minlength=self.E)
                                     for layer in range(self.L)]) for e in experts]).astype(np.float64)
        if kn.context_share > 0:
            m = max(1, int(round(kn.context_share * self.E)))
            tie = self.rng.random(counts.shape) * 1e-3
            g = (np.argsort(np.argsort(-(counts + tie), axis=-1), axis=-1) < m).astype(np.float64)
        else:
            g = np.log1p(counts) - np.log1p(counts).mean(axis=-1, keepdims=True)
        self.ctx = (kn.context * g).astype(np.float32)

    def home(self, token: np.ndarray) -> np.ndarray:
        """(n, L, k) experts a token is drawn to, a fixed function of the token (by popularity)."""
        t = token.astype(np.int64).astype(np.uint64)[:, None, None]
        with np.errstate(over="ignore"):
            key = t * np.uint64(1_000_003) + (np.arange(self.L, dtype=np.uint64)[None, :, None] << np.uint64(20)) \
                + np.arange(self.k, dtype=np.uint64)[None, None, :] + self.salt
        u = (splitmix(key) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        idx = np.empty(u.shape, dtype=np.int64)
        for layer in range(self.L):
            idx[:, layer] = np.searchsorted(self.cdf[layer], u[:, layer])
        return np.minimum(idx, self.E - 1)

    def route(self, token: np.ndarray, request: np.ndarray, prev: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Experts (n, L, k) int16 and gates (n, L, k) float32 of nodes with these tokens, requests
        and previous-token experts (`prev` (n, L, k), -1 where there is none)."""
        n = len(token)
        ex = np.empty((n, self.L, self.k), dtype=np.int16)
        gates = np.empty((n, self.L, self.k), dtype=np.float32)
        step = max(1, CHUNK_FLOATS // (self.L * self.E))
        for a in range(0, n, step):
            b = min(n, a + step)
            ex[a:b], gates[a:b] = self._route(token[a:b], request[a:b], None if prev is None else prev[a:b])
        return ex, gates

    def _route(self, token: np.ndarray, request: np.ndarray, prev: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        kn = self.knobs
        m = len(token)
        free = 1.0 - kn.token_affinity - kn.parent_affinity
        if free > 0:  # in place, the same float32 operations in the same order: -log(-log(u)), + (pop + ctx), * free
            s = self.rng.random((m, self.L, self.E), dtype=np.float32)
            np.clip(s, 1e-7, 1 - 1e-7, out=s)
            np.log(s, out=s)
            np.negative(s, out=s)
            np.log(s, out=s)
            np.negative(s, out=s)
            bias = np.take(self.ctx, request, axis=0)  # a copy: the context table stays as it is
            np.add(self.log_pop[None], bias, out=bias)
            s += bias
            s *= free
        else:
            s = np.zeros((m, self.L, self.E), dtype=np.float32)
        rows = np.arange(m)[:, None, None]
        lay = np.arange(self.L)[None, :, None]
        if kn.token_affinity > 0:
            s[rows, lay, self.home(token)] += kn.token_affinity * HOME
        if prev is not None and kn.parent_affinity > 0:
            has = prev >= 0
            bonus = np.where(has, kn.parent_affinity * STICK, 0.0).astype(np.float32)
            s[rows, lay, np.maximum(prev, 0)] += bonus
        if kn.n_group:
            g = s.reshape(m, self.L, kn.n_group, self.E // kn.n_group)
            top2 = np.partition(g, g.shape[-1] - 2, axis=-1)[..., -2:].sum(-1) if g.shape[-1] > 1 else g[..., 0]
            keep = np.argsort(-top2, axis=-1, kind="stable")[..., : kn.topk_group]
            mask = np.ones((m, self.L, kn.n_group), dtype=bool)
            np.put_along_axis(mask, keep, False, axis=-1)
            s[np.repeat(mask, self.E // kn.n_group, axis=-1)] = -np.inf
        part = np.argpartition(-s, self.k - 1, axis=-1)[..., : self.k] if self.k < self.E else np.broadcast_to(np.arange(self.E), s.shape).copy()
        pv = np.take_along_axis(s, part, axis=-1)
        o = np.lexsort((part, -pv), axis=-1)  # best first; ties by expert id (deterministic)
        top = np.take_along_axis(part, o, axis=-1)
        val = np.take_along_axis(pv, o, axis=-1)
        g = np.exp(val - val[..., :1])
        return top.astype(np.int16), (g / g.sum(-1, keepdims=True)).astype(np.float32)


def route_sequences(router: Router, tokens: np.ndarray, request: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Routing of (requests, P) token streams: each token's previous token is the one before it."""
    R, P = tokens.shape
    ex = np.empty((R, P, router.L, router.k), dtype=np.int16)
    gates = np.empty((R, P, router.L, router.k), dtype=np.float32)
    prev = None
    for p in range(P):
        ex[:, p], gates[:, p] = router.route(tokens[:, p], request, prev)
        prev = ex[:, p]
    return ex, gates


def route_trees(router: Router, nodes: dict[str, np.ndarray], tree_start: np.ndarray,
                roots: tuple[np.ndarray, np.ndarray] | None = None,
                extra: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Routing of every node of a trace's trees (node arrays in trace order).

    Roots come from `roots` (real or pre-generated, (trees, L, k) experts and gates, in tree
    order) or are generated as a chain per request; then depth by depth each node from its
    parent; a node whose path hash matches a root or a shallower node copies it, as does one
    matching `extra` (hashes, experts, gates of real positions past the last root).
    """
    n = len(nodes["token"])
    req = nodes["request_id"].astype(np.int64)
    depth = nodes["depth"].astype(np.int64)
    parent = nodes["parent"].astype(np.int64)
    start = np.repeat(tree_start[:-1], np.diff(tree_start))
    prow = np.where(parent >= 0, start + np.maximum(parent, 0), -1)
    root_rows = tree_start[:-1]
    rreq = req[root_rows]
    h = path_hashes(nodes, tree_start)
    ex = np.empty((n, router.L, router.k), dtype=np.int16)
    gates = np.empty((n, router.L, router.k), dtype=np.float32)
    if roots is not None:
        ex[root_rows], gates[root_rows] = roots
    else:
        prev = None
        order = np.lexsort((nodes["pos"][root_rows], rreq))
        r_sorted = root_rows[order]
        req_ids, inv = np.unique(rreq[order], return_inverse=True)
        counts = np.bincount(inv)
        P = int(counts.max(initial=0))
        at = np.arange(len(r_sorted)) - np.repeat(np.cumsum(counts) - counts, counts)
        prev = np.full((len(req_ids), router.L, router.k), -1, dtype=np.int16)
        for p in range(P):
            here = at == p
            rows = r_sorted[here]
            e, g = router.route(nodes["token"][rows], req[rows], prev[inv[here]])
            ex[rows], gates[rows] = e, g
            prev[inv[here]] = e
    known_h = h[root_rows]
    known_rows = root_rows
    for d in range(1, int(depth.max(initial=0)) + 1):
        rows = np.flatnonzero(depth == d)
        ex[rows], gates[rows] = router.route(nodes["token"][rows], req[rows], ex[prow[rows]])
        order = np.argsort(known_h, kind="stable")
        sh = known_h[order]
        i = np.minimum(np.searchsorted(sh, h[rows]), max(len(sh) - 1, 0))
        same = (sh[i] == h[rows]) if len(sh) else np.zeros(len(rows), bool)
        src = known_rows[order[i[same]]]
        ex[rows[same]], gates[rows[same]] = ex[src], gates[src]
        if extra is not None and len(extra[0]):
            j = np.minimum(np.searchsorted(extra[0], h[rows]), len(extra[0]) - 1)
            hit = extra[0][j] == h[rows]
            ex[rows[hit]], gates[rows[hit]] = extra[1][j[hit]], extra[2][j[hit]]
        known_h = np.concatenate([known_h, h[rows]])
        known_rows = np.concatenate([known_rows, rows])
    return ex, gates


def path_hashes(nodes: dict[str, np.ndarray], tree_start: np.ndarray) -> np.ndarray:
    """The path hash of every node (for checks: equal hashes = same token in the same context)."""
    n = len(nodes["token"])
    req = nodes["request_id"].astype(np.int64)
    parent = nodes["parent"].astype(np.int64)
    start = np.repeat(tree_start[:-1], np.diff(tree_start))
    root_rows = tree_start[:-1]
    h = np.zeros(n, dtype=np.uint64)
    rreq = req[root_rows]
    order = np.lexsort((nodes["pos"][root_rows], rreq))
    prev_req, prev_h = None, None
    for i in order:
        base = splitmix(np.array([rreq[i] + 1], dtype=np.uint64) * MIX) if rreq[i] != prev_req else prev_h
        h[root_rows[i]] = path_hash(base, nodes["token"][root_rows[i] : root_rows[i] + 1])[0]
        prev_req, prev_h = rreq[i], h[root_rows[i] : root_rows[i] + 1]
    depth = nodes["depth"].astype(np.int64)
    for d in range(1, int(depth.max(initial=0)) + 1):
        rows = np.flatnonzero(depth == d)
        h[rows] = path_hash(h[start[rows] + parent[rows]], nodes["token"][rows])
    return h
