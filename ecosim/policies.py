"""Selection policies: which subtree of each recorded candidate tree a step verifies.

A selection is a boolean mask over node rows: the root plus an ancestor-closed set of at most
`budget` other nodes per tree. The `oracle` bound is not a selection (it needs the verdicts);
it lives in oracle.py.

`ecospec` scores a frontier node x against the buffer B (the predicted experts, per MoE layer, of
the nodes chosen so far, root included):

    value(x)  = exp(cum_logprob(x))          P(x is accepted) if the draft is calibrated; adding x
                                             raises the expected accepted length by exactly this
    cost(x)   = |pred(x) \\ B| / (L * k)      new experts x would wake, as a fraction of the experts
                                             one token with no overlap wakes (L MoE layers, top-k)
    difference score:  value - lambda * cost  (default; stop when every frontier score is < 0)
    ratio score:       value / (1 + lambda * cost)   (never stops early; fills the budget)

Why the difference: it is the marginal gain of a knapsack-style objective (expected tokens minus
lambda x expected expert reads), so lambda reads as "tokens one fresh token's experts are worth"
and the stop rule falls out of it. Both scores rank by value alone at lambda = 0, and ties go to
the higher cum_logprob, then the lower node id, so lambda = 0 selects exactly what `confidence`
selects. The cost is counted in experts, not seconds, so one lambda serves every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ecosim import bitsets
from ecosim.errors import EcoSimError
from ecosim.tree import Trees

POLICIES = ("ar", "confidence", "ecospec", "oracle")
Score = Literal["difference", "ratio"]


@dataclass(frozen=True)
class PolicySpec:
    """A policy and its knobs; the oracle and ar ignore budget, lambda and predictor."""

    name: str = "ecospec"
    budget: int = 16
    lam: float = 0.5
    predictor: str = "token"
    score: Score = "difference"

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise EcoSimError(f"unknown policy {self.name!r}; known: {', '.join(POLICIES)}")
        if self.budget < 0:
            raise EcoSimError(f"budget must be >= 0, got {self.budget}")
        if not np.isfinite(self.lam) or self.lam < 0:
            raise EcoSimError(f"lambda must be finite and >= 0, got {self.lam}")
        if self.score not in ("difference", "ratio"):
            raise EcoSimError(f"unknown score {self.score!r}; known: difference, ratio")

    @property
    def speculative(self) -> bool:
        return self.name != "ar"

    def label(self) -> str:
        if self.name == "ecospec":
            return f"ecospec b={self.budget} λ={self.lam:g} {self.predictor}"
        if self.name == "confidence":
            return f"confidence b={self.budget}"
        return self.name


def select_ar(trees: Trees) -> np.ndarray:
    """Plain decoding: the root only."""
    return trees.depth == 0


def select_confidence(trees: Trees, budget: int) -> np.ndarray:
    """EAGLE-2's rerank: the root and the `budget` nodes of highest cumulative draft log-prob.

    Ties go to the lower node id. cum_logprob never rises along a path and parent < child, so
    every node's parent ranks before it: the selection is ancestor-closed.
    """
    order = np.lexsort((trees.node, -trees.cum_logprob, trees.depth == 0, trees.tree_of_row))
    # Within each tree: non-roots first by (-cum, node), the root last; rank among non-roots.
    tree_sorted = trees.tree_of_row[order]
    first = np.searchsorted(tree_sorted, np.arange(trees.n_trees))
    rank = np.empty(trees.n_rows, dtype=np.int64)
    rank[order] = np.arange(trees.n_rows) - first[tree_sorted]
    return (trees.depth == 0) | (rank < budget)


def select_ecospec(
    trees: Trees, budget: int, lam: float, predicted: np.ndarray, num_experts: int, top_k: int,
    score: Score = "difference",
) -> np.ndarray:
    """Greedy cost-aware growth from the root, vectorised over trees (see the module docstring).

    `predicted` is (rows, layers, m) int16 predicted expert ids per node (-1 pads).
    """
    selected = trees.depth == 0
    if budget == 0:
        return selected
    layers = predicted.shape[1]
    norm = float(layers * top_k)
    value_all = np.exp(trees.cum_logprob)
    n_max = int(trees.n_nodes.max(initial=1))
    parent_local = trees.trace.nodes["parent"].astype(np.int64)
    words = bitsets.n_words(num_experts)
    chunk = max(8, (64 << 20) // (n_max * layers * words * 8))  # ~64 MB of bitsets at a time
    for a in range(0, trees.n_trees, chunk):
        t = np.arange(a, min(a + chunk, trees.n_trees))
        n = trees.n_nodes[t]
        valid = np.arange(n_max)[None, :] < n[:, None]
        rows = np.where(valid, trees.start[t][:, None] + np.arange(n_max)[None, :], 0)
        value = np.where(valid, value_all[rows], -np.inf)
        cum = np.where(valid, trees.cum_logprob[rows], -np.inf)
        parent = np.where(valid, parent_local[rows], -2)
        bits = bitsets.pack(predicted[rows.ravel()], num_experts).reshape(len(t), n_max, layers, words)
        buffer = bits[:, 0].copy()
        chosen = np.zeros(valid.shape, dtype=bool)
        chosen[:, 0] = True
        frontier = valid & (parent == 0)
        active = np.ones(len(t), dtype=bool)
        ix = np.arange(len(t))
        for _ in range(budget):
            live = frontier & active[:, None]
            if not live.any():
                break
            new = bitsets.count(bits & ~buffer[:, None]).sum(axis=-1) / norm
            s = value - lam * new if score == "difference" else value / (1.0 + lam * new)
            s = np.where(live, s, -np.inf)
            best = s.max(axis=1)
            tie = live & (s == best[:, None])
            c = np.where(tie, cum, -np.inf)
            tie &= c == c.max(axis=1)[:, None]
            pick = np.argmax(tie, axis=1)  # first True: the lowest node id among exact ties
            go = live.any(axis=1) & (best >= 0 if score == "difference" else True)
            active &= go
            g = ix[go]
            chosen[g, pick[go]] = True
            frontier[g, pick[go]] = False
            buffer[g] |= bits[g, pick[go]]
            frontier[g] |= (parent[g] == pick[go][:, None]) & valid[g]
        selected[rows[chosen]] = True
    return selected
