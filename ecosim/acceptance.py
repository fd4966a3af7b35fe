"""Acceptance calibration: P(node accepted | its parent accepted) from what the draft side knows.

A cost-aware policy values a node by the probability that verifying it adds a token. The raw
draft probability, `exp(cum_logprob)`, is miscalibrated (on the committed real traces it
underestimates acceptance several-fold, on synthetic ones it overestimates it), so this module
fits, per trace, a model of the conditional acceptance

    a(x) = P(x accepted | parent(x) accepted)

from draft-side features only: the node's depth, its own draft log-prob and its rank among its
siblings (by draft log-prob). The value of a node is then the probability that its whole path is
accepted, the product of `a` along it:

    value(x) = prod over y on the path root -> x (root excluded) of a(y)

and the expected accepted length of an ancestor-closed selection S is sum over x in S of value(x).

The model is a table of cells (depth x sibling rank x log-prob bin) whose empirical rates are
shrunk towards the coarser cell (depth x rank, then depth, then the trace's mean) with a prior of
`PRIOR` pseudo-observations: a binned estimate that needs no solver and degrades gracefully where
data are thin. It is fitted on the rows whose parent was accepted (the only rows that condition
applies to), leave-requests-out in `FOLDS` folds, as the expert predictors are (kfold.py), so no
request is valued by a model that saw its verdicts. A single-request trace is fitted in-sample and
says so (`Calibration.in_sample`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numba import njit

from ecosim.tree import Trees

FOLDS = 4
MAX_DEPTH = 8  # deeper nodes share the last depth cell
MAX_RANK = 3  # ranks 3, 4, ... share one cell
LP_BINS = 8  # draft log-prob bins (quantiles of the training rows)
PRIOR = 10.0  # pseudo-observations of the coarser cell's rate
ECE_BINS = 10
EPS = 1e-4
VALUES = ("calibrated", "raw")


def sibling_rank(trees: Trees) -> np.ndarray:
    """Each node's rank among its siblings by draft log-prob (0 = the draft's favourite; ties go to
    the lower node id); 0 for roots."""
    lp = trees.trace.nodes["draft_logprob"].astype(np.float64)
    return _sibling_rank(trees.start, trees.n_nodes, trees.trace.nodes["parent"].astype(np.int64), lp)


@njit(cache=True)
def _sibling_rank(start, n_nodes, parent, lp):
    """A node's rank = its siblings ahead of it (a higher log-prob, or an equal one and a lower id).
    Per tree the children are grouped by parent (in id order) and each family sorted stably by
    descending log-prob: a small one by insertion, a large one by merge sort. Each node is compared with its siblings
    only: comparing every pair of a tree's nodes grew with the square of the tree (and a 3-key
    lexsort of the whole trace was slower still)."""
    rank = np.zeros(len(lp), dtype=np.int64)
    big = np.max(n_nodes) if len(n_nodes) else 0
    off = np.empty(big + 1, dtype=np.int64)  # children of node p: kids[off[p]:off[p + 1]]
    fill = np.empty(big + 1, dtype=np.int64)
    kids = np.empty(big, dtype=np.int64)
    for t in range(len(start)):
        s0, n = start[t], n_nodes[t]
        off[: n + 1] = 0
        for x in range(1, n):
            off[parent[s0 + x] + 1] += 1
        for p in range(n):
            off[p + 1] += off[p]
            fill[p] = off[p]
        for x in range(1, n):
            p = parent[s0 + x]
            kids[fill[p]] = x
            fill[p] += 1
        for p in range(n):
            a, b = off[p], off[p + 1]
            if b - a <= 32:  # insertion sort by descending log-prob; ties keep id order (stable)
                for i in range(a + 1, b):
                    x = kids[i]
                    lx = lp[s0 + x]
                    j = i - 1
                    while j >= a and lp[s0 + kids[j]] < lx:
                        kids[j + 1] = kids[j]
                        j -= 1
                    kids[j + 1] = x
                for r in range(b - a):
                    rank[s0 + kids[a + r]] = r
            else:
                fam = kids[a:b]
                order = np.argsort(-lp[s0 + fam], kind="mergesort")  # stable: equal log-probs keep id order
                for r in range(b - a):
                    rank[s0 + fam[order[r]]] = r
    return rank


@dataclass
class AcceptanceModel:
    """The fitted table: `rate[depth, rank, bin]` of conditional acceptance."""

    edges: np.ndarray  # (LP_BINS - 1,) inner log-prob bin edges
    rate: np.ndarray  # (MAX_DEPTH + 1, MAX_RANK + 1, LP_BINS)

    @staticmethod
    def cells(depth: np.ndarray, rank: np.ndarray, lp: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, ...]:
        return np.minimum(depth, MAX_DEPTH), np.minimum(rank, MAX_RANK), np.digitize(lp, edges)

    @classmethod
    def fit(cls, depth: np.ndarray, rank: np.ndarray, lp: np.ndarray, accepted: np.ndarray) -> AcceptanceModel:
        """Fit on conditioned rows (parent accepted): features and the 0/1 verdict of each."""
        qs = np.linspace(0, 1, LP_BINS + 1)[1:-1]
        edges = np.unique(np.quantile(lp, qs)) if len(lp) else np.zeros(0)
        d, r, b = cls.cells(depth, rank, lp, edges)
        y = accepted.astype(np.float64)
        shape = (MAX_DEPTH + 1, MAX_RANK + 1, LP_BINS)

        def sums(*idx: np.ndarray, dims: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
            flat = np.ravel_multi_index(idx, dims) if idx else np.zeros(len(y), dtype=np.int64)
            size = int(np.prod(dims)) if dims else 1
            return np.bincount(flat, y, size), np.bincount(flat, minlength=size).astype(np.float64)

        s0, n0 = y.sum(), float(len(y))
        p0 = (s0 + 0.5) / (n0 + 1.0)  # a trace with no conditioned rows still gets a number
        sd, nd = sums(d, dims=shape[:1])
        pd = (sd + PRIOR * p0) / (nd + PRIOR)
        sr, nr = sums(d, r, dims=shape[:2])
        pr = (sr.reshape(shape[:2]) + PRIOR * pd[:, None]) / (nr.reshape(shape[:2]) + PRIOR)
        sb, nb = sums(d, r, b, dims=shape)
        pb = (sb.reshape(shape) + PRIOR * pr[:, :, None]) / (nb.reshape(shape) + PRIOR)
        return cls(edges, np.clip(pb, EPS, 1 - EPS))

    def predict(self, depth: np.ndarray, rank: np.ndarray, lp: np.ndarray) -> np.ndarray:
        return self.rate[self.cells(depth, rank, lp, self.edges)]


def path_value(trees: Trees, conditional: np.ndarray) -> np.ndarray:
    """value(x) = product of the conditional acceptances along the path (1 at the root)."""
    return _path_product(np.asarray(conditional, dtype=np.float64), trees.depth, trees.parent_row)


@njit(cache=True)
def _path_product(conditional, depth, parent_row):
    """One pass in row order: a parent's row comes before its children's (parent < node, checked
    on read), so value(parent) is final when a child multiplies by it."""
    value = np.empty(len(conditional))
    for x in range(len(conditional)):
        value[x] = 1.0 if depth[x] == 0 else conditional[x] * value[parent_row[x]]
    return value


@dataclass
class Calibration:
    """Out-of-fold conditional acceptances of a trace, their path values, and how well they fit.

    The fit's quality (ECE, Brier, predicted accepted lengths, each against the raw draft
    probability) is measured when first asked for: a policy valuing nodes needs `value` only."""

    conditional: np.ndarray  # (rows,) a(x); 1 at roots
    value: np.ndarray  # (rows,) product along the path
    in_sample: bool  # a single-request trace: fitted on its own verdicts
    tree_slope: float  # mean over folds of b in E[A | V] = a + b V (rescale_trees): 1 when V ranks trees as they are
    trees: Trees = field(repr=False)
    cond_rows: np.ndarray = field(repr=False)  # the rows a(x) is a probability for: parent accepted

    @cached_property
    def _errors(self) -> tuple[float, float, float, float]:
        y = self.trees.accepted[self.cond_rows]
        lp = self.trees.trace.nodes["draft_logprob"][self.cond_rows].astype(np.float64)
        return (*calibration_error(self.conditional[self.cond_rows], y), *calibration_error(np.exp(lp), y))

    @property
    def ece(self) -> float:
        """Expected calibration error of a(x) on the conditioned rows."""
        return self._errors[0]

    @property
    def brier(self) -> float:
        return self._errors[1]

    @property
    def raw_ece(self) -> float:
        """The same for exp(draft_logprob)."""
        return self._errors[2]

    @property
    def raw_brier(self) -> float:
        return self._errors[3]

    @cached_property
    def predicted_accept_len(self) -> float:
        """Mean over trees of the sum of value over the full tree."""
        t = self.trees
        nonroot = t.depth > 0
        return float(np.bincount(t.tree_of_row[nonroot], self.value[nonroot], t.n_trees).mean())

    @cached_property
    def raw_predicted_accept_len(self) -> float:
        """The same with exp(cum_logprob)."""
        t = self.trees
        nonroot = t.depth > 0
        return float(np.bincount(t.tree_of_row[nonroot], np.exp(t.cum_logprob[nonroot]), t.n_trees).mean())

    @property
    def observed_accept_len(self) -> float:
        """Mean over trees of A(p)."""
        return float(self.trees.accept_len.mean())

    def describe(self) -> dict[str, float | bool]:
        return {k: getattr(self, k) for k in ("ece", "brier", "raw_ece", "raw_brier", "predicted_accept_len",
                                              "raw_predicted_accept_len", "observed_accept_len", "in_sample",
                                              "tree_slope")}


def calibration_error(p: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> tuple[float, float]:
    """(ECE, Brier) of probabilities p against 0/1 outcomes y: ECE = sum over equal-width bins of
    (share of rows) x |mean p - mean y|."""
    if len(p) == 0:
        return 0.0, 0.0
    y = y.astype(np.float64)
    b = np.minimum((p * bins).astype(np.int64), bins - 1)
    gap = np.abs(np.bincount(b, p, bins) - np.bincount(b, y, bins))
    return float(gap.sum() / len(p)), float(np.mean((p - y) ** 2))


def fold_of_rows(trees: Trees, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """Each row's fold: the trace's requests dealt into folds by a seeded permutation."""
    req = trees.trace.positions["request_id"]
    ids = np.unique(req)
    perm = np.random.default_rng(seed).permutation(len(ids))
    fold = np.empty(len(ids), dtype=np.int64)
    fold[perm] = np.arange(len(ids)) % max(1, min(folds, len(ids)))
    return fold[np.searchsorted(ids, req)][trees.tree_of_row]


def rescale_trees(trees: Trees, value: np.ndarray, fold: np.ndarray, n_folds: int) -> float:
    """Second stage, per tree: scale each tree's node values so that their sum, the tree's predicted
    accepted length V, becomes E[A | V] = a + b V, a line fitted (least squares, b >= 0) on the
    other folds' trees against their observed accepted length A (the whole tree verified). Returns
    the mean slope b. In place on `value`.

    Why: the node model is calibrated node by node, but whether a *step* pays for its draft is
    decided on the tree's sum, and a sum of noisy per-node estimates spreads trees wider than
    their acceptance does (regression to the mean: on the synthetic traces the fifth of trees
    predicted lowest accepts as much as the rest). A policy that declines to draft on a low V then
    gives away tokens. With b = 1, a = 0 (V ranks trees as they are) nothing changes; with b = 0
    (V says nothing about a tree) every tree is worth the trace's mean. Scaling a tree's values by
    one factor keeps the order of its nodes, so only how much a tree is worth changes, not which
    of its nodes come first; a prefix's value is taken to scale with its tree's (an assumption)."""
    v = _tree_sums(value, trees.depth, trees.tree_of_row, trees.n_trees)
    a_obs = trees.accept_len.astype(np.float64)
    tree_fold = fold[trees.start]
    scale = np.ones(trees.n_trees)
    slopes = []
    for f in range(n_folds):
        train = tree_fold != f if n_folds > 1 else np.ones(trees.n_trees, dtype=bool)
        x, y = v[train], a_obs[train]
        if len(x) < 2 or np.ptp(x) == 0.0:
            continue
        b = max(0.0, float(np.cov(x, y, bias=True)[0, 1] / np.var(x)))
        a = float(y.mean() - b * x.mean())
        mine = (tree_fold == f) & (v > 0)
        scale[mine] = np.maximum(a + b * v[mine], 0.0) / v[mine]
        slopes.append(b)
    _scale_rows(value, trees.depth, trees.tree_of_row, scale)
    return float(np.mean(slopes)) if slopes else 1.0


@njit(cache=True)
def _tree_sums(value, depth, tree_of_row, n_trees):
    """Per tree, the sum of its non-root rows' values, added in row order (np.bincount's order)."""
    v = np.zeros(n_trees)
    for x in range(len(value)):
        if depth[x] > 0:
            v[tree_of_row[x]] += value[x]
    return v


@njit(cache=True)
def _scale_rows(value, depth, tree_of_row, scale):
    """value[x] *= scale[tree of x] for the non-root rows, in place."""
    for x in range(len(value)):
        if depth[x] > 0:
            value[x] *= scale[tree_of_row[x]]


def calibrate(trees: Trees, folds: int = FOLDS, seed: int = 0) -> Calibration:
    """Fit the acceptance model leave-requests-out and report its calibration (module docstring)."""
    lp = trees.trace.nodes["draft_logprob"].astype(np.float64)
    rank, depth = sibling_rank(trees), trees.depth
    nonroot = depth > 0
    cond_rows = nonroot & trees.accepted[trees.parent_row]
    fold = fold_of_rows(trees, folds, seed)
    n_folds = int(fold.max(initial=0)) + 1
    rates = np.empty((n_folds, MAX_DEPTH + 1, MAX_RANK + 1, LP_BINS))
    edges = np.full((n_folds, LP_BINS - 1), np.inf)  # a fold's fewer distinct edges: the rest past every log-prob
    for f in range(n_folds):
        train = cond_rows & (fold != f) if n_folds > 1 else cond_rows
        model = AcceptanceModel.fit(depth[train], rank[train], lp[train], trees.accepted[train])
        rates[f], edges[f, : len(model.edges)] = model.rate, model.edges
    conditional = _out_of_fold(depth, rank, lp, fold, rates, edges)  # each row by its own fold's model
    value = path_value(trees, conditional)
    slope = rescale_trees(trees, value, fold, n_folds)
    return Calibration(conditional, value, n_folds == 1, slope, trees, cond_rows)


@njit(cache=True)
def _out_of_fold(depth, rank, lp, fold, rates, edges):
    """a(x) of every non-root row from the model of its fold: `AcceptanceModel.predict` row by row
    (cells clipped, np.digitize's bin: the edges at or below the log-prob), in one pass; 1 at roots."""
    out = np.ones(len(lp))
    for x in range(len(lp)):
        if depth[x] > 0:
            f, b = fold[x], 0
            for j in range(edges.shape[1]):  # sorted edges: the count at or below is the bin (no early exit, no branch)
                b += edges[f, j] <= lp[x]
            out[x] = rates[f, min(depth[x], MAX_DEPTH), min(rank[x], MAX_RANK), b]
    return out


def node_values(trees: Trees, kind: str, calibration: Calibration | None = None) -> np.ndarray:
    """A policy's value of every node: `raw` exp(cum_logprob) or `calibrated` (fitted if not given)."""
    if kind == "raw":
        return np.exp(trees.cum_logprob)
    if kind == "calibrated":
        return (calibration or calibrate(trees)).value
    raise ValueError(f"unknown value {kind!r}; known: {', '.join(VALUES)}")
