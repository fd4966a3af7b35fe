"""`token`: per MoE layer, expert frequencies conditioned on the candidate's token.

For a token t seen n_t times in training, with c_t[l, e] the times expert e was among its top-k at
layer l, and p[l, e] the layer's prior (`freq`), the score is the Dirichlet-smoothed share

    s_t[l, e] = (c_t[l, e] / k + alpha * p[l, e]) / (n_t + alpha)

so a token seen often follows its own counts, a rare one leans on the prior, and an unseen one
gets the prior exactly (the back-off to `freq`). The table keeps, per token and layer, only the
`width` most counted experts (default 2 x top-k); the rest fall back to the prior term.

Per candidate this is a table lookup: the selected set of every known token is computed once
(on first use) and a candidate's prediction is a gather.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecosim.predictors.base import Candidates, ScoringPredictor, Selection, Shape, top_ids
from ecosim.predictors.freq import prior_of_counts
from ecosim.pairwise import pairwise_plan
from ecosim.predictors.token_kernels import count_top, pick_top_k, slot_counts


@dataclass
class TokenTable:
    """Sparse per-token expert counts: the `width` most counted experts per (token, layer)."""

    tokens: np.ndarray  # (T,) int64, sorted
    n: np.ndarray  # (T,) float32 occurrences
    ids: np.ndarray  # (T, L, width) int16, distinct per (token, layer)
    counts: np.ndarray  # (T, L, width) float32
    prior: np.ndarray  # (L, E) float32
    alpha: float
    top_k: int

    @classmethod
    def fit(cls, token: np.ndarray, experts: np.ndarray, num_experts: int, width: int, alpha: float,
            rows: np.ndarray | None = None) -> TokenTable:
        """Counted from the labels `experts` (read at `rows` when given, one per token: in place)."""
        _, L, k = experts.shape
        E = num_experts
        width = min(width, E)
        uniq, inv, n = np.unique(token.astype(np.int64), return_inverse=True, return_counts=True)
        order = _in_place(np.argsort(inv, kind="stable"), rows)
        bounds = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        ids, counts, slots = count_top(order, bounds, np.ascontiguousarray(experts), E, width)
        prior = prior_of_counts(slots).astype(np.float32)  # expert_prior(experts, E), from the same pass
        return cls(uniq, n.astype(np.float32), ids, counts, prior, float(alpha), k)

    @classmethod
    def fit_top_k(cls, token: np.ndarray, experts: np.ndarray, num_experts: int, width: int, alpha: float, k: int,
                  block: int = 256, rows: np.ndarray | None = None) -> tuple[TokenTable, np.ndarray]:
        """`fit`, then `top_k_ids` of every token (and first of an unseen one), `block` tokens at a
        time: one block's counts exist at once, never the whole table's. The table returned keeps
        no counts (empty `ids`, `counts`): it looks tokens up, for a model that only selects."""
        _, L, top_k = experts.shape
        width = min(width, num_experts)
        uniq, inv, n = np.unique(token.astype(np.int64), return_inverse=True, return_counts=True)
        order = _in_place(np.argsort(inv, kind="stable"), rows)
        bounds = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        ex = np.ascontiguousarray(experts)  # the routing's own type: no copy of it
        # count_top's totals, first: every label row, in row order
        every = np.arange(len(ex), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        prior = prior_of_counts(slot_counts(ex, every, num_experts)).astype(np.float32)
        n = n.astype(np.float32)
        picked = np.empty((len(uniq) + 1, L, min(k, num_experts)), dtype=np.int16)
        for a in range(0, len(uniq), block):
            b = min(a + block, len(uniq))
            ids, counts, _ = count_top(order, bounds[a : b + 1], ex, num_experts, width)
            part = cls(uniq[a:b], n[a:b], ids, counts, prior, float(alpha), top_k)
            picked[a + 1 : b + 1] = part.top_k_ids(np.arange(b - a), k)
            if a == 0:
                picked[0] = part.top_k_ids(np.array([-1]), k)[0]
        empty = np.zeros((0, L, width), dtype=np.int16)
        return cls(uniq, n, empty, empty.astype(np.float32), prior, float(alpha), top_k), picked

    def lookup(self, token: np.ndarray) -> np.ndarray:
        """Index of each token in the table, -1 if unseen."""
        i = np.searchsorted(self.tokens, token)
        i = np.minimum(i, max(len(self.tokens) - 1, 0))
        hit = (self.tokens[i] == token) if len(self.tokens) else np.zeros(len(token), dtype=bool)
        return np.where(hit, i, -1)

    def top_k_ids(self, idx: np.ndarray, k: int) -> np.ndarray:
        """(n, L, k) int16: `top_ids(scores_of(idx), k)`, the k best-scored experts of table rows
        `idx`, without the dense scores (token_kernels.py: same ids, ties included)."""
        L, E = self.prior.shape
        k = min(k, E)
        if self.alpha <= 0 or len(self.tokens) == 0 or k <= 0:  # no prior term to rank the unlisted by
            return top_ids(self.scores_of(idx), k).astype(np.int16)
        prior_order = np.argsort(-self.prior.astype(np.float64), axis=1, kind="stable")
        c = np.ascontiguousarray
        return pick_top_k(c(idx, dtype=np.int64), c(self.n, dtype=np.float32), c(self.ids, dtype=np.int16),
                          c(self.counts, dtype=np.float32), c(self.prior, dtype=np.float32), prior_order,
                          pairwise_plan(E), self.alpha, self.top_k, k)

    def scores_of(self, idx: np.ndarray) -> np.ndarray:
        """(n, L, E) float32 scores of table rows `idx` (-1 = unseen: the prior)."""
        L, E = self.prior.shape
        if len(self.tokens) == 0:
            return np.broadcast_to(self.prior, (len(idx), L, E)).copy()
        seen = idx >= 0
        j = np.maximum(idx, 0)
        n_t = np.where(seen, self.n[j], 0.0).astype(np.float32)
        denom = (n_t + self.alpha)[:, None, None]
        out = np.empty((len(idx), L, E), dtype=np.float32)
        np.multiply(self.prior[None], self.alpha / denom, out=out)
        add = np.where(seen[:, None, None], self.counts[j], 0.0) / (self.top_k * denom)
        ids = self.ids[j].astype(np.int64)
        np.put_along_axis(out, ids, np.take_along_axis(out, ids, axis=-1) + add, axis=-1)
        out /= out.sum(axis=-1, keepdims=True)
        return out


def _in_place(order: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """Label indices in `order` as rows of the routing they are read from."""
    return order if rows is None else np.asarray(rows, dtype=np.int64)[order]


class TokenPredictor(ScoringPredictor):
    """Expert frequencies conditioned on the token, backed off to `freq` for rare tokens."""

    kind = "token"

    def __init__(self, shape: Shape, table: TokenTable, selection: Selection = Selection()):
        self.shape = shape
        self.table = table
        self.selection = selection
        self.name = "token"
        self._picked: tuple[Selection, np.ndarray] | None = None

    @classmethod
    def fit(cls, shape: Shape, experts: np.ndarray, token: np.ndarray, selection: Selection = Selection(),
            alpha: float = 1.0, width: int | None = None, selection_only: bool = False, rows: np.ndarray | None = None,
            **_: Any) -> TokenPredictor:
        """`selection_only`: a model that will only select (`for_selection_only`), fitted and
        prepared a block of tokens at a time (TokenTable.fit_top_k) where its selection is a top-k.
        `rows`: the labels are `experts[rows]`, read in place (one row per token)."""
        width = width or 2 * shape.top_k
        if selection_only and selection.mass is None and alpha > 0 and len(token):
            k = selection.width(shape.num_experts, shape.top_k)
            table, picked = TokenTable.fit_top_k(token, experts, shape.num_experts, width, alpha, k, rows=rows)
            model = cls(shape, table, selection)
            model._picked = (selection, picked)
            return model
        model = cls(shape, TokenTable.fit(token, experts, shape.num_experts, width, alpha, rows=rows), selection)
        if selection_only:
            model.for_selection_only()
        return model

    def scores(self, cands: Candidates) -> np.ndarray:
        return self.table.scores_of(self.table.lookup(cands.token))

    def prepare(self, trace: Any = None) -> float:
        """The selected set of every known token (and of an unseen one), computed once."""
        if self._picked is not None and self._picked[0] == self.selection:
            return 0.0
        t0 = time.perf_counter()
        every = np.arange(-1, len(self.table.tokens))  # -1 first: the unseen token's set
        if self.selection.mass is None:
            k = self.selection.width(self.shape.num_experts, self.shape.top_k)
            self._picked = (self.selection, self.table.top_k_ids(every, k))
            return time.perf_counter() - t0
        picked = np.concatenate([self.selection.apply(self.table.scores_of(every[a : a + 1024]), self.shape.top_k)
                                 for a in range(0, len(every), 1024)])
        self._picked = (self.selection, picked)
        return time.perf_counter() - t0

    def for_selection_only(self) -> None:
        """`select` reads the table's tokens and the prepared sets only: the per-token counts go
        (scores, arrays and a new selection would need them: not asked of such a model)."""
        self.prepare()
        t = self.table
        self.table = TokenTable(t.tokens, t.n, t.ids[:0], t.counts[:0], t.prior, t.alpha, t.top_k)

    def select(self, cands: Candidates) -> np.ndarray:
        return self._picked_sets()[self.table.lookup(cands.token) + 1]

    def sets_by_token(self, token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The prepared sets (the unseen token's first) and each token's entry: `select` is their gather."""
        return self._picked_sets(), self.table.lookup(token) + 1

    def _picked_sets(self) -> np.ndarray:
        self.prepare()
        assert self._picked is not None
        return self._picked[1]

    def arrays(self) -> dict[str, np.ndarray]:
        t = self.table
        counts = t.counts.astype(np.uint32) if t.counts.max(initial=0) < 2**32 else t.counts
        return {"tokens": t.tokens, "n": t.n, "ids": t.ids, "counts": counts, "prior": t.prior}

    def config(self) -> dict[str, Any]:
        return {"alpha": self.table.alpha, "width": int(self.table.ids.shape[-1])}

    @classmethod
    def from_arrays(cls, shape: Shape, selection: Selection, arrays: dict[str, np.ndarray], config: dict[str, Any]) -> TokenPredictor:
        table = TokenTable(arrays["tokens"].astype(np.int64), arrays["n"].astype(np.float32), arrays["ids"].astype(np.int16),
                           arrays["counts"].astype(np.float32), arrays["prior"].astype(np.float32), float(config["alpha"]),
                           shape.top_k)
        return cls(shape, table, selection)
