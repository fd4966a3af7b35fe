"""What a policy may know of the target's routing before it verifies: an expert predictor.

A predictor maps each candidate node to a predicted expert set per MoE layer. It sees only what
the draft side has at selection time, never the node's own true experts (except `oracle`, which
exists to bound what a perfect predictor would gain). What the draft side has, per node:

- its token and its parent's token (for a root, the previous position's token);
- its depth in the candidate tree;
- its parent's *predicted* experts (for a root: the previous position's true experts);
- the previous position's *true* routing: every position before the root has been verified, so
  its experts are known (they are what an offload cache or a prefetcher already holds).

Two layers to the interface:

- `predict(trace) -> (rows, layers, m) int16` expert ids, -1 pads; `predict_sets(trace)` the same as
  distinct sets and an index per row (sets.py): what the cost-aware policies consume.
- `ScoringPredictor.scores(Candidates) -> (n, layers, experts) float32`: a score for every expert,
  a distribution over experts per (node, layer) (the share of the node's top-k slots each expert
  is expected to take). A `Selection` turns scores into sets: the top `k`, or the smallest set
  holding a probability `mass` (capped at `max_size`). `predict` walks the trees level by level,
  in chunks of rows, so each level's candidates see their parents' predicted sets.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ecosim.errors import EcoSimError
from ecosim.predictors.candidates import Candidates
from ecosim.predictors.sets import PredictedSets
from ecosim.predictors.view import DraftView, draft_view, fingerprint
from ecosim.trace.io import Trace

CHUNK = 2048  # candidates scored at once at most
CHUNK_BYTES = 4 << 20  # ... and at most this much per (n, layers, experts) float32 block: numpy's
# temporaries then stay in malloc's heap instead of fresh mmaps (page faults cost more than the math)


def chunk_rows(layers: int, experts: int) -> int:
    """Candidates per chunk for a routing shape."""
    return int(max(16, min(CHUNK, CHUNK_BYTES // (4 * layers * experts))))


@dataclass(frozen=True)
class Selection:
    """How a predicted set is taken from scores: top `k` (default: the model's top-k), or the
    smallest set whose scores hold `mass` of the total (at most `max_size`, default all experts)."""

    k: int | None = None
    mass: float | None = None
    max_size: int | None = None

    def __post_init__(self) -> None:
        if self.k is not None and self.mass is not None:
            raise EcoSimError("give a top-k or a probability mass for the predicted set, not both")
        if self.k is not None and self.k < 1:
            raise EcoSimError(f"top-k of the predicted set must be >= 1, got {self.k}")
        if self.mass is not None and not 0.0 < self.mass <= 1.0:
            raise EcoSimError(f"mass of the predicted set must be in (0, 1], got {self.mass}")
        if self.max_size is not None and self.max_size < 1:
            raise EcoSimError(f"max set size must be >= 1, got {self.max_size}")

    def width(self, num_experts: int, top_k: int) -> int:
        """Slots per (node, layer) of the predicted ids."""
        if self.mass is not None:
            return min(num_experts, self.max_size or num_experts)
        return min(num_experts, self.k or top_k)

    def apply(self, scores: np.ndarray, top_k: int) -> np.ndarray:
        """(n, layers, E) scores -> (n, layers, width) int16 ids, best first, -1 pads."""
        E = scores.shape[-1]
        if self.mass is None:
            return top_ids(scores, min(E, self.k or top_k)).astype(np.int16)
        cap = min(E, self.max_size or E)
        ids = top_ids(scores, cap)
        vals = np.take_along_axis(scores, ids, axis=-1)
        total = scores.sum(axis=-1, keepdims=True)
        before = np.cumsum(vals, axis=-1) - vals
        keep = before < self.mass * total  # the expert that crosses the mass is kept
        keep[..., 0] = True
        return np.where(keep, ids, -1).astype(np.int16)

    def describe(self, top_k: int | None = None) -> str:
        if self.mass is not None:
            return f"mass {self.mass:g}" + (f" (at most {self.max_size})" if self.max_size else "")
        return f"top-{self.k or top_k or 'k'}"

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "mass": self.mass, "max_size": self.max_size}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Selection:
        return cls(d.get("k"), d.get("mass"), d.get("max_size"))


def top_ids(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores on the last axis, best first; ties go to the lower index.

    For small k (the usual top-8 of 256) k passes of argmax are several times faster in numpy
    than argpartition over many short rows; larger k sorts.
    """
    E = scores.shape[-1]
    if k >= E or k > 32:
        order = np.argsort(-scores.astype(np.float64), axis=-1, kind="stable")
        return order[..., : min(k, E)]
    if k <= 0:
        return np.empty((*scores.shape[:-1], 0), dtype=np.int64)
    work = np.maximum(scores, np.float32(-3e38), dtype=np.float32).reshape(-1, E)  # -inf ranks as the least finite
    return _top_k(work, k).reshape(*scores.shape[:-1], k)


@njit(cache=True)
def _top_k(work, k):
    """Per row, the k largest values' indices, best first, ties to the lower index: one compiled
    pass per row keeping the k best seen so far in order (a later equal value never displaces an
    earlier one), what k passes of argmax, each masking its pick, give."""
    n, E = work.shape
    out = np.empty((n, k), dtype=np.int64)
    best = np.empty(k, dtype=np.float32)
    for r in range(n):
        have = 0
        for e in range(E):
            v = work[r, e]
            if have == k and not v > best[k - 1]:
                continue
            j = have - 1 if have < k else k - 2  # the last kept slot that may move down
            while j >= 0 and best[j] < v:
                if j + 1 < k:
                    best[j + 1] = best[j]
                    out[r, j + 1] = out[r, j]
                j -= 1
            best[j + 1] = v
            out[r, j + 1] = e
            if have < k:
                have += 1
    return out


def multi_hot(ids: np.ndarray, num_experts: int, dtype: Any = np.float32) -> np.ndarray:
    """(n, layers, m) ids with -1 pads -> (n, layers, E) 0/1."""
    n, L, m = ids.shape
    out = np.zeros((n, L, num_experts + 1), dtype=dtype)
    np.put_along_axis(out, np.where(ids >= 0, ids, num_experts).astype(np.int64), 1, axis=-1)
    return out[..., :num_experts]


class ExpertPredictor(ABC):
    """Predicted expert sets for the node rows of a trace."""

    name: str = "predictor"
    reads_routing: bool = False  # predicts from the trace's true routing (a bound, not a draft-side model)

    def prepare(self, trace: Trace) -> float:
        """One-time work before predicting `trace` (tables, fits); returns its seconds. `predict`
        does it too when needed; `evaluate` calls it first so the per-candidate cost excludes it."""
        return 0.0

    @abstractmethod
    def predict(self, trace: Trace, only: np.ndarray | None = None) -> np.ndarray:
        """(rows, moe_layers, m) int16 predicted expert ids per node and layer; -1 pads unused slots.

        `only` (bool per row, optional) asks for those rows' trees only: rows outside may hold
        anything (-1 or predictions); callers read the rows they asked for.
        """

    def predict_sets(self, trace: Trace) -> PredictedSets:
        """`predict` of every row as predicted sets (sets.py): row by row unless the predictor
        knows its distinct sets (a token-conditioned one: one set per token)."""
        return PredictedSets(self.predict(trace))

    def describe(self) -> str:
        return self.name


class OraclePredictor(ExpertPredictor):
    """The true routing from the trace: an upper bound on any real predictor."""

    name = "oracle"
    reads_routing = True

    def predict(self, trace: Trace, only: np.ndarray | None = None) -> np.ndarray:
        return trace.experts_3d()


class NoPredictor(ExpertPredictor):
    """Predicts nothing: every candidate costs 0, so `ecospec` reduces to confidence ranking."""

    name = "none"

    def predict(self, trace: Trace, only: np.ndarray | None = None) -> np.ndarray:
        return np.full((len(trace.nodes["node"]), trace.model.num_moe_layers, 1), -1, dtype=np.int16)


@dataclass(frozen=True)
class Shape:
    """The routing shape a trained predictor is for: it refuses traces of another shape."""

    model: str
    num_moe_layers: int
    num_experts: int
    top_k: int

    @classmethod
    def of(cls, trace: Trace) -> Shape:
        m = trace.model
        return cls(m.name, m.num_moe_layers, m.num_experts, m.top_k)

    def check(self, trace: Trace, who: str) -> None:
        other = Shape.of(trace)
        if (other.num_moe_layers, other.num_experts, other.top_k) != (self.num_moe_layers, self.num_experts, self.top_k):
            raise EcoSimError(
                f"{who} was trained for {self.model} ({self.num_moe_layers} MoE layers x {self.num_experts} experts, "
                f"top-{self.top_k}); trace {trace.name} is {other.model} ({other.num_moe_layers} x "
                f"{other.num_experts}, top-{other.top_k})"
            )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ScoringPredictor(ExpertPredictor):
    """A predictor that scores every expert per layer; `predict` selects sets from the scores."""

    kind: str = "scoring"
    shape: Shape
    selection: Selection = Selection()
    training: dict[str, Any] | None = None  # the file's training record (requests, fingerprints)
    source: str | None = None  # the file it was loaded from
    warn_in_sample: bool = True  # say so on stderr when asked to predict requests it was trained on

    def describe(self) -> str:
        where = f"{self.source}, " if self.source else ""
        return f"{self.kind} ({where}{self.selection.describe(self.shape.top_k)})"

    def in_sample_requests(self, trace: Trace) -> list[int]:
        """Requests of `trace` this predictor was trained on (recognised by content fingerprint)."""
        if not self.training:
            return []
        fp = fingerprint(trace)
        return sorted({r for t in self.training.get("traces", []) if t.get("fingerprint") == fp for r in t.get("train_requests", [])})

    @abstractmethod
    def scores(self, cands: Candidates) -> np.ndarray:
        """(n, layers, E) float32, each (node, layer) a distribution over experts."""

    def rank_scores(self, cands: Candidates) -> np.ndarray:
        """Scores in the same order as `scores` (need not be normalised: top-k only ranks them)."""
        return self.scores(cands)

    def for_selection_only(self) -> None:
        """Drop what only scoring, fitting or saving needs, keeping what `select` reads: for a model
        that predicts one trace and is then discarded (a k-fold fold's). Nothing by default."""

    def select(self, cands: Candidates) -> np.ndarray:
        s = self.scores(cands) if self.selection.mass is not None else self.rank_scores(cands)
        return self.selection.apply(s, self.shape.top_k)

    def sets_by_token(self, token: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """When what `select` returns depends on the candidate's token alone: the distinct sets
        (sets, layers, m) and the entry of each token in `token`; None (the default) otherwise."""
        return None

    def _checked(self, trace: Trace, only: np.ndarray | None) -> DraftView:
        """The trace's draft view, after refusing a trace of another shape and warning when the
        rows asked for belong to requests this predictor was trained on."""
        self.shape.check(trace, self.describe())
        view = draft_view(trace)
        if self.warn_in_sample and self.training:
            asked = set(np.unique(view.request[view.whole_trees(only)]).tolist())
            seen = sorted(asked & set(self.in_sample_requests(trace)))
            if seen:
                print(f"ecosim: warning: predictor {self.source or self.kind} was trained on request(s) {seen} of trace "
                      f"{trace.name}; its predictions there are in-sample (optimistic)", file=sys.stderr)
        return view

    def predict_sets(self, trace: Trace) -> PredictedSets:
        self.shape.check(trace, self.describe())
        by_token = self.sets_by_token(draft_view(trace).token)
        if by_token is None:
            return PredictedSets(self.predict(trace))
        self._checked(trace, None)
        table, entry = by_token
        return PredictedSets(table.astype(np.int16, copy=False), entry.astype(np.int64, copy=False))

    def predict(self, trace: Trace, only: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """As `ExpertPredictor.predict`; `out` (rows, layers, m) int16 receives the rows asked for in
        place of a new array (k-fold prediction fills one array fold by fold)."""
        view = self._checked(trace, only)
        true = trace.experts_3d()
        m = self.selection.width(self.shape.num_experts, self.shape.top_k)
        if out is None:
            out = np.full((view.n_rows, self.shape.num_moe_layers, m), -1, dtype=np.int16)
        mask = view.whole_trees(only)
        chunk = chunk_rows(self.shape.num_moe_layers, self.shape.num_experts)
        for rows in view.levels:
            rows = rows[mask[rows]]
            for a in range(0, len(rows), chunk):
                r = rows[a : a + chunk]
                out[r] = self.select(view.candidates(r, true, out))
        return out
