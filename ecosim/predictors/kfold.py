"""A predictor kind by name (`freq`, `token`, `context`): trained on the fly, leave-requests-out.

`ecosim replay --predictor token` replays a trace with a predictor that has never seen the request
it predicts: the trace's requests are dealt into `folds` folds by a seeded permutation, and the
rows of each fold are predicted by a model fitted on the other folds' requests of the same trace.
That is honest (no request is predicted in-sample) at the price of fitting `folds` models per
trace, and of training on fewer requests than a predictor file fitted on other traces would have.
A trace with a single request cannot be predicted this way: train a file on other traces, or
(`in_sample=True`, what `ecosim tune` does on such a trace, saying so) fit the one request on itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.predictors.base import ExpertPredictor, Selection, Shape
from ecosim.predictors.sets import PredictedSets
from ecosim.predictors.train import KINDS, PREV_KINDS, TrainingRows, fit
from ecosim.predictors.view import draft_view, fingerprint, request_ids, request_mask
from ecosim.trace.io import Trace

FOLDS = 4


MIN_REQUESTS = 2  # a request is predicted by a model fitted on the others


def check_requests(n: int, kind: str, where: str) -> None:
    """Refuse a predictor trained on the fly (leave-requests-out) over fewer than MIN_REQUESTS requests."""
    if n < MIN_REQUESTS:
        raise EcoSimError(f"{where} holds {n} request{'s' * (n != 1)}; predictor {kind!r} by name is trained on the other "
                          f"requests of the replayed trace, so it needs at least {MIN_REQUESTS} (or train a predictor "
                          "file on other traces: ecosim predictor train)")


class KFoldPredictor(ExpertPredictor):
    """Fits `kind` `folds` times per trace, each fold's requests predicted by the others' model."""

    def __init__(self, kind: str, folds: int = FOLDS, seed: int = 0, selection: Selection = Selection(),
                 in_sample: bool = False, **options: Any):
        if kind not in KINDS:
            raise EcoSimError(f"unknown predictor kind {kind!r}; known: {', '.join(KINDS)}")
        if folds < 2:
            raise EcoSimError(f"leave-requests-out needs at least 2 folds, got {folds}")
        self.kind, self.folds, self.seed, self.selection, self.options = kind, folds, seed, selection, options
        self.in_sample = in_sample  # a trace of one request: fit it on itself instead of refusing
        self.name = kind
        self._trace: str | None = None  # fingerprint of the trace the fitted models are for
        self._models: dict[int, Any] = {}  # fold -> model fitted on the other folds' requests
        self._fold_of: dict[int, int] = {}

    def prepare(self, trace: Trace) -> float:
        """Fit the fold models of `trace` (cached)."""
        t0 = time.perf_counter()
        self._fitted(trace)
        return time.perf_counter() - t0

    def _fitted(self, trace: Trace) -> tuple[dict[int, int], dict[int, Any]]:
        """The fold models of `trace`, fitted once (those of the previous trace are dropped)."""
        fp = fingerprint(trace)
        if fp != self._trace:
            fold_of = self.fold_of(trace)
            self._models = {}
            for f in sorted(set(fold_of.values())):
                self._models[f] = self._fit_fold(trace, fold_of, f)
            self._trace, self._fold_of = fp, fold_of
        return self._fold_of, self._models

    def _fit_fold(self, trace: Trace, fold_of: dict[int, int], f: int, selection_only: bool = False) -> Any:
        """The model that predicts fold f: fitted on the other folds' requests (all, in-sample, when one);
        `selection_only`: used once to select, then dropped (`ScoringPredictor.for_selection_only`)."""
        others = [r for r, g in fold_of.items() if g != f] or list(fold_of)
        rows = TrainingRows.gather([(trace, request_mask(trace, others))], prev=self.kind in PREV_KINDS)
        model = fit(self.kind, Shape.of(trace), rows, self.selection, selection_only=selection_only, seed=self.seed,
                    **self.options)
        model.prepare(trace)  # e.g. the token table's per-token sets: one-time work, not per candidate
        if selection_only:
            model.for_selection_only()
        return model

    def describe(self) -> str:
        how = f"{self.folds}-fold by request" + (", in-sample on a one-request trace" if self.in_sample else "")
        return f"{self.kind} (trained on the fly, {how}, {self.selection.describe()})"

    def fold_of(self, trace: Trace) -> dict[int, int]:
        """Request id -> fold (a seeded deal of the trace's requests)."""
        reqs = request_ids(trace)
        if self.in_sample and len(reqs) < MIN_REQUESTS:
            return {r: 0 for r in reqs}
        check_requests(len(reqs), self.kind, str(trace.path))
        n = min(self.folds, len(reqs))
        perm = np.random.default_rng(self.seed).permutation(len(reqs))
        return {reqs[j]: i % n for i, j in enumerate(perm)}

    def _fold_models(self, trace: Trace, only: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, Any]]:
        """(rows mask, model) of each fold: the rows of its requests within `only`'s trees, and the
        model fitted on the other folds. For the whole trace no model is kept: each fold's is
        fitted, cut to what selecting reads, used and dropped in turn (one in memory at a time)."""
        mask = draft_view(trace).whole_trees(only)
        whole = only is None and fingerprint(trace) != self._trace
        fold_of = self.fold_of(trace) if whole else self._fitted(trace)[0]
        for f in sorted(set(fold_of.values())):  # each fold's rows: whole trees, a request's
            rows = request_mask(trace, [r for r, g in fold_of.items() if g == f]) & mask
            if rows.any():
                yield rows, (self._fit_fold(trace, fold_of, f, selection_only=True) if whole else self._models[f])

    def _empty(self, trace: Trace, rows: int) -> np.ndarray:
        shape = Shape.of(trace)
        m = self.selection.width(shape.num_experts, shape.top_k)
        return np.full((rows, shape.num_moe_layers, m), -1, dtype=np.int16)

    def predict_sets(self, trace: Trace) -> PredictedSets:
        """Every row's set, each fold's from its own model: the folds' distinct sets stacked while
        the fold models predict by token alone (`sets_by_token`), else row by row as `predict`."""
        token = draft_view(trace).token
        index = np.full(len(token), -1, dtype=np.int64)
        tables: list[np.ndarray] = []
        out: np.ndarray | None = None  # row by row, once a fold's model is not by token
        for rows, model in self._fold_models(trace):
            by_token = None if out is not None else model.sets_by_token(token[rows])
            if by_token is not None:
                table, entry = by_token
                index[rows] = sum(map(len, tables)) + entry
                tables.append(table.astype(np.int16, copy=False))
            else:
                if out is None:  # the folds so far, row by row
                    out = self._empty(trace, len(token))
                    done = index >= 0
                    if tables:
                        out[done] = np.concatenate(tables)[index[done]]
                model.predict(trace, only=rows, out=out)
            del model  # before the next fold's is fitted
        if out is not None:
            return PredictedSets(out)
        return PredictedSets(np.concatenate(tables) if tables else self._empty(trace, 0), np.maximum(index, 0))

    def predict(self, trace: Trace, only: np.ndarray | None = None) -> np.ndarray:
        out = self._empty(trace, draft_view(trace).n_rows)
        for rows, model in self._fold_models(trace, only):
            model.predict(trace, only=rows, out=out)
            del model  # before the next fold's is fitted
        return out
