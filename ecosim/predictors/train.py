"""Training predictors from traces, split by request (never by node).

A request's candidate trees share its context (and, through tree attention, identical routing of
the same position in consecutive trees), so a node-level split would leak: the unit of every
split here is a (trace, request) pair. `split_requests` draws the held-out pairs with a seeded
permutation; the predictor file records both sides, and `ecosim predictor eval` uses the
held-out side of the same traces by default.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.predictors.base import ScoringPredictor, Selection, Shape
from ecosim.predictors.view import draft_view, fingerprint, request_ids, request_mask
from ecosim.trace.io import Trace

KINDS = ("freq", "token", "context")
PREV_KINDS = ("context",)  # the kinds that read the previous position's true experts (TrainingRows.prev_experts)


@dataclass
class TrainingRows:
    """Node rows to learn from, with the draft-side features and the true routing (the label).

    The label is read in place where it can be: `source[label_rows]` (`label_rows` None: `source`
    itself). A kind that counts (freq, token) reads it there (`labels`); `experts` gathers it into
    one array for a kind that indexes it (context). The k-fold fits train on the other folds'
    requests, rows spread over the trace: gathering their routing copied three quarters of it
    for every fold."""

    token: np.ndarray  # (N,) int64
    parent_token: np.ndarray  # (N,) int64, -1 unknown
    depth: np.ndarray  # (N,) int64
    source: np.ndarray  # (rows, L, k) routing the labels are rows of (in its held type: trace/arrays.py routing_dtype)
    label_rows: np.ndarray | None  # (N,) rows of `source` that are the labels, in order; None: all of it
    prev_experts: np.ndarray  # (N, L, k) int16: previous position's true experts, -1 at pos 0
    unit: np.ndarray  # (N,) int64: index of the (trace, request) the row comes from
    parent: np.ndarray  # (N,) int64: index (into these rows) of the parent, -1 for roots

    def labels(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(source, rows): the (N, L, k) labels are `source[rows]` (all of `source` when None)."""
        return self.source, self.label_rows

    @cached_property
    def experts(self) -> np.ndarray:
        """(N, L, k): the labels as one array (a copy where they are not one run of the source)."""
        return self.source if self.label_rows is None else self.source[self.label_rows]

    def __len__(self) -> int:
        return len(self.token)

    @classmethod
    def gather(cls, parts: list[tuple[Trace, np.ndarray]], prev: bool = True) -> TrainingRows:
        """Rows of each (trace, row mask); units number the (trace, request) pairs in order. Masks
        are widened to whole candidate trees, so every row's parent is among the rows.

        The routing of a single run of rows is a view of the trace's, not a copy (read-only: no
        kind writes its training rows); `prev=False` (a kind that does not read the previous
        position's experts: not in PREV_KINDS) leaves `prev_experts` -1 everywhere, as a view."""
        cols: dict[str, list[np.ndarray]] = {k: [] for k in ("token", "parent_token", "depth", "experts", "prev_experts", "unit", "parent")}
        where: tuple[np.ndarray, np.ndarray] | None = None  # one part's (routing, rows): its labels read in place
        next_unit, offset = 0, 0
        for trace, mask in parts:
            v = draft_view(trace)
            rows = np.flatnonzero(v.whole_trees(mask))
            local = np.full(v.n_rows, -1, dtype=np.int64)
            local[rows] = np.arange(len(rows)) + offset
            offset += len(rows)
            cols["parent"].append(np.where(v.parent_row[rows] >= 0, local[np.maximum(v.parent_row[rows], 0)], -1))
            true = trace.experts_3d()
            prev_row = v.prev_row[rows]
            cols["token"].append(v.token[rows])
            cols["parent_token"].append(v.parent_token[rows])
            cols["depth"].append(v.depth[rows])
            contiguous = len(rows) and rows[-1] - rows[0] + 1 == len(rows)  # one run of rows: a view, not a copy
            if len(parts) == 1 and not contiguous:
                where = (_read_only(true), rows)
            else:
                cols["experts"].append(_read_only(true[rows[0] : rows[-1] + 1]) if contiguous else true[rows])
            cols["prev_experts"].append(np.where((prev_row >= 0)[:, None, None], true[np.maximum(prev_row, 0)], np.int16(-1))
                                        if prev else np.broadcast_to(np.int16(-1), (len(rows), *true.shape[1:])))
            _, unit = np.unique(v.request[rows], return_inverse=True)
            cols["unit"].append(unit.astype(np.int64) + next_unit)
            next_unit += int(unit.max(initial=-1)) + 1
        labels = cols.pop("experts")
        joined = {k: np.concatenate(v) if len(v) != 1 else v[0] for k, v in cols.items()}
        if where is not None:
            return cls(**joined, source=where[0], label_rows=where[1])
        return cls(**joined, source=np.concatenate(labels) if len(labels) != 1 else labels[0], label_rows=None)


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


def split_requests(traces: list[Trace], holdout: float, seed: int) -> list[tuple[list[int], list[int]]]:
    """(train, held-out) request ids per trace: a seeded draw of round(holdout x pairs) held-out
    (trace, request) pairs, at least one when holdout > 0, never all of them."""
    if not 0.0 <= holdout < 1.0:
        raise EcoSimError(f"--holdout must be in [0, 1), got {holdout}")
    pairs = [(i, r) for i, t in enumerate(traces) for r in request_ids(t)]
    n_out = int(round(holdout * len(pairs)))
    if holdout > 0:
        n_out = max(1, n_out)
    if n_out >= len(pairs):
        raise EcoSimError(f"--holdout {holdout} leaves no request to train on ({len(pairs)} requests in all)")
    perm = np.random.default_rng(seed).permutation(len(pairs))
    out = {pairs[j] for j in perm[:n_out]}
    return [([r for r in request_ids(t) if (i, r) not in out], [r for r in request_ids(t) if (i, r) in out])
            for i, t in enumerate(traces)]


def common_shape(traces: list[Trace]) -> Shape:
    shapes = {(s.num_moe_layers, s.num_experts, s.top_k): s for s in map(Shape.of, traces)}
    if len(shapes) != 1:
        names = ", ".join(f"{t.name} ({Shape.of(t).model})" for t in traces)
        raise EcoSimError(f"traces of different routing shapes cannot train one predictor: {names}")
    return next(iter(shapes.values()))


def fit(kind: str, shape: Shape, data: TrainingRows, selection: Selection = Selection(), selection_only: bool = False,
        **options: Any) -> ScoringPredictor:
    """A predictor of `kind` fitted on `data` (options: see each kind's `fit`). `selection_only`:
    the model will only select, once (a k-fold fold's): a kind may leave out what scoring needs."""
    if len(data) == 0:
        raise EcoSimError("no training rows")
    if kind == "freq":
        from ecosim.predictors.freq import FreqPredictor
        return FreqPredictor.fit(shape, *data.labels(), selection=selection)
    if kind == "token":
        from ecosim.predictors.token import TokenPredictor
        source, rows = data.labels()
        return TokenPredictor.fit(shape, source, data.token, selection, selection_only=selection_only, rows=rows,
                                  **_pick(options, "alpha", "width"))
    if kind == "context":
        from ecosim.predictors.context_fit import fit_context
        return fit_context(shape, data, selection, **options)
    raise EcoSimError(f"unknown predictor kind {kind!r}; known: {', '.join(KINDS)}")


def _pick(options: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: options[k] for k in names if options.get(k) is not None}


def train(traces: list[Trace], kind: str, holdout: float = 0.25, seed: int = 0, selection: Selection = Selection(),
          **options: Any) -> tuple[ScoringPredictor, dict[str, Any]]:
    """Split requests, fit on the training side, and describe it all (the file's `training` record)."""
    if kind not in KINDS:
        raise EcoSimError(f"unknown predictor kind {kind!r}; known: {', '.join(KINDS)}")
    if not traces:
        raise EcoSimError("no traces to train on")
    shape = common_shape(traces)
    split = split_requests(traces, holdout, seed)
    t0 = time.perf_counter()
    data = TrainingRows.gather([(t, request_mask(t, tr)) for t, (tr, _) in zip(traces, split)])
    pred = fit(kind, shape, data, selection, seed=seed, **options)
    seconds = time.perf_counter() - t0
    record = {
        "holdout": holdout,
        "seed": seed,
        "rows": len(data),
        "seconds": round(seconds, 3),
        "traces": [
            {"name": t.name, "path": str(t.path), "fingerprint": fingerprint(t), "synthetic": t.synthetic,
             "train_requests": tr, "heldout_requests": ho}
            for t, (tr, ho) in zip(traces, split)
        ],
    }
    return pred, record
