"""How good a predictor is, on node rows it was not trained on. Every number defined once:

- recall: sum over (node, layer) of |P ∩ T| / sum of |T|, where P is the predicted set and T the
  true top-k (micro-average; "recall@k" when P is a top-k set). `per_layer` splits it by MoE layer
  and `recall_by_depth` by the node's depth in its candidate tree (0 = the root).
- precision: sum of |P ∩ T| / sum of |P| (null when nothing is predicted).
- set_size: mean |P| per (node, layer).
- marginal cost, per non-root candidate x, summed over MoE layers, in experts (what `ecospec`
  charges, before dividing by layers x top-k): the experts x brings that its ancestors (root to
  parent, the buffer if the selection were exactly x's path) do not already need.
    true:       |T(x) \\ T(ancestors)|     what verifying x really adds
    predicted:  |P(x) \\ P(ancestors)|     what the policy computes (its buffer is predicted too)
    true_buffer.predicted: |P(x) \\ T(ancestors)|   the same against the true buffer
  reported as means, bias (mean predicted - true), mae (mean |predicted - true|), mae / (layers x
  top-k) and the Pearson correlation over candidates (ranking is what the policy uses).
- us_per_candidate: wall time of `predict` over the evaluated rows / their number, in
  microseconds (numpy on this machine's CPU, in chunks of candidates of one tree depth, at most
  2048 and at most 4 MB of scores; includes the walk over tree levels, excludes reading the trace).
  cpu_us_per_candidate: the same in CPU time of this process (all its threads): closer to the
  cost on an idle core when the machine is shared.
- prepare_seconds: one-time work before predicting, not in us_per_candidate: the `token`
  table's per-token sets; for a kind trained on the fly, fitting its fold models.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ecosim import bitsets
from ecosim.predictors.base import ExpertPredictor
from ecosim.predictors.view import draft_view
from ecosim.trace.io import Trace


@dataclass
class _Pair:
    """Running sums for the error and correlation of predicted against true values."""

    n: int = 0
    t: float = 0.0
    p: float = 0.0
    abs_err: float = 0.0
    tt: float = 0.0
    pp: float = 0.0
    tp: float = 0.0

    def add(self, true: np.ndarray, pred: np.ndarray) -> None:
        t, p = true.astype(np.float64), pred.astype(np.float64)
        self.n += len(t)
        self.t += t.sum()
        self.p += p.sum()
        self.abs_err += np.abs(p - t).sum()
        self.tt += (t * t).sum()
        self.pp += (p * p).sum()
        self.tp += (t * p).sum()

    def merge(self, o: _Pair) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(o, k))

    def report(self, norm: float) -> dict[str, Any]:
        if self.n == 0:
            return {"candidates": 0}
        n = self.n
        vt, vp = self.tt / n - (self.t / n) ** 2, self.pp / n - (self.p / n) ** 2
        cov = self.tp / n - self.t * self.p / n**2
        r = cov / np.sqrt(vt * vp) if vt > 1e-12 and vp > 1e-12 else None
        return {
            "candidates": n,
            "true_mean": round(float(self.t / n), 4),
            "predicted_mean": round(float(self.p / n), 4),
            "bias": round(float((self.p - self.t) / n), 4),
            "mae": round(float(self.abs_err / n), 4),
            "mae_normalised": round(float(self.abs_err / n / norm), 5),
            "pearson": None if r is None else round(float(r), 4),
        }


@dataclass
class Tally:
    """Sums over evaluated rows; `report` turns them into the metrics above."""

    layers: int
    top_k: int
    rows: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    prepare_seconds: float = 0.0
    hits: np.ndarray = field(default=None)  # type: ignore[assignment]
    pred: np.ndarray = field(default=None)  # type: ignore[assignment]
    true: np.ndarray = field(default=None)  # type: ignore[assignment]
    depth_hits: dict[int, int] = field(default_factory=dict)
    depth_true: dict[int, int] = field(default_factory=dict)
    marginal: _Pair = field(default_factory=_Pair)
    marginal_true_buffer: _Pair = field(default_factory=_Pair)

    def __post_init__(self) -> None:
        for k in ("hits", "pred", "true"):
            if getattr(self, k) is None:
                setattr(self, k, np.zeros(self.layers, dtype=np.int64))

    def merge(self, o: Tally) -> None:
        self.rows += o.rows
        self.seconds += o.seconds
        self.cpu_seconds += o.cpu_seconds
        self.prepare_seconds += o.prepare_seconds
        self.hits += o.hits
        self.pred += o.pred
        self.true += o.true
        for d in o.depth_true:
            self.depth_hits[d] = self.depth_hits.get(d, 0) + o.depth_hits[d]
            self.depth_true[d] = self.depth_true.get(d, 0) + o.depth_true[d]
        self.marginal.merge(o.marginal)
        self.marginal_true_buffer.merge(o.marginal_true_buffer)

    def report(self) -> dict[str, Any]:
        h, p, t = int(self.hits.sum()), int(self.pred.sum()), int(self.true.sum())
        norm = float(self.layers * self.top_k)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_recall = np.where(self.true > 0, self.hits / np.maximum(self.true, 1), np.nan)
            per_prec = np.where(self.pred > 0, self.hits / np.maximum(self.pred, 1), np.nan)
        marg = self.marginal.report(norm)
        marg["true_buffer"] = {k: v for k, v in self.marginal_true_buffer.report(norm).items() if k not in ("candidates", "true_mean")}
        return {
            "rows": self.rows,
            "recall": round(h / t, 5) if t else None,
            "precision": round(h / p, 5) if p else None,
            "set_size": round(p / max(self.rows * self.layers, 1), 4),
            "us_per_candidate": round(self.seconds / self.rows * 1e6, 3) if self.rows else None,
            "cpu_us_per_candidate": round(self.cpu_seconds / self.rows * 1e6, 3) if self.rows else None,
            "prepare_seconds": round(self.prepare_seconds, 3),
            "per_layer": {
                "recall": [None if np.isnan(x) else round(float(x), 4) for x in per_recall],
                "precision": [None if np.isnan(x) else round(float(x), 4) for x in per_prec],
            },
            "recall_by_depth": {str(d): round(self.depth_hits[d] / self.depth_true[d], 4)
                                for d in sorted(self.depth_true) if self.depth_true[d]},
            "marginal": marg,
        }


def evaluate(pred: ExpertPredictor, trace: Trace, mask: np.ndarray) -> Tally:
    """Score `pred` on the rows of `mask` (whole requests) of `trace`."""
    return evaluate_with(pred, trace, mask)[0]


def evaluate_with(pred: ExpertPredictor, trace: Trace, mask: np.ndarray) -> tuple[Tally, np.ndarray | None]:
    """`evaluate`, also returning the predictions (rows outside `mask` undefined; None when the mask
    is empty), so a caller that replays them next does not predict twice."""
    m = trace.model
    L, E = m.num_moe_layers, m.num_experts
    view = draft_view(trace)
    tally = Tally(L, m.top_k)
    mask = view.whole_trees(mask)
    if not mask.any():
        return tally, None
    tally.prepare_seconds = pred.prepare(trace)
    t0, c0 = time.perf_counter(), time.process_time()
    predicted = pred.predict(trace, only=mask)
    tally.seconds, tally.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    true = trace.experts_3d()
    for r in np.unique(view.request[mask]):
        rows = np.flatnonzero(mask & (view.request == r))
        _tally_rows(tally, view, rows, bitsets.pack(true[rows], E), bitsets.pack(predicted[rows], E))
    return tally, predicted


def _tally_rows(tally: Tally, view: Any, rows: np.ndarray, tb: np.ndarray, pb: np.ndarray) -> None:
    """Add one request's rows (whole trees, in row order) to the tally."""
    hits = bitsets.count(tb & pb)  # (n, L)
    tally.rows += len(rows)
    tally.hits += hits.sum(axis=0)
    tally.pred += bitsets.count(pb).sum(axis=0)
    tsize = bitsets.count(tb)
    tally.true += tsize.sum(axis=0)
    depth = view.depth[rows]
    for d in np.unique(depth):
        s = depth == d
        tally.depth_hits[int(d)] = tally.depth_hits.get(int(d), 0) + int(hits[s].sum())
        tally.depth_true[int(d)] = tally.depth_true.get(int(d), 0) + int(tsize[s].sum())
    # Ancestor unions, level by level (rows are in topological order within each tree).
    local = np.full(view.n_rows, -1, dtype=np.int64)
    local[rows] = np.arange(len(rows))
    at, ap = np.zeros_like(tb), np.zeros_like(pb)
    for d in range(1, int(depth.max(initial=0)) + 1):
        r = np.flatnonzero(depth == d)
        par = local[view.parent_row[rows[r]]]
        at[r] = at[par] | tb[par]
        ap[r] = ap[par] | pb[par]
    deep = depth > 0
    true_m = bitsets.count(tb[deep] & ~at[deep]).sum(axis=1)
    tally.marginal.add(true_m, bitsets.count(pb[deep] & ~ap[deep]).sum(axis=1))
    tally.marginal_true_buffer.add(true_m, bitsets.count(pb[deep] & ~at[deep]).sum(axis=1))
