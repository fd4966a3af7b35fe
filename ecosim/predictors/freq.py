"""`freq`: per MoE layer, the experts' overall frequency in the training rows.

The prior: what a token-blind predictor gets. Every candidate is predicted the same set per layer
(the layer's most used experts), so its cost per candidate is a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim.predictors.base import Candidates, ScoringPredictor, Selection, Shape


def expert_prior(experts: np.ndarray, num_experts: int, rows: np.ndarray | None = None) -> np.ndarray:
    """(rows, layers, k) true experts (read at `rows` when given) -> (layers, E) float64 share of the
    top-k slots each expert took."""
    L = experts.shape[1]
    counts = np.zeros((L, num_experts), dtype=np.float64)
    for layer in range(L):
        e = (experts[:, layer, :] if rows is None else experts[rows, layer, :]).ravel()
        counts[layer] = np.bincount(e[e >= 0], minlength=num_experts)[:num_experts]
    return prior_of_counts(counts)


def prior_of_counts(counts: np.ndarray) -> np.ndarray:
    """(layers, E) slot counts -> each layer's shares (uniform for a layer with none)."""
    counts = counts.astype(np.float64)
    total = counts.sum(axis=1, keepdims=True)
    return np.where(total > 0, counts / np.maximum(total, 1), 1.0 / counts.shape[1])


class FreqPredictor(ScoringPredictor):
    """The layer's expert frequencies, the same for every candidate."""

    kind = "freq"

    def __init__(self, shape: Shape, prior: np.ndarray, selection: Selection = Selection()):
        self.shape = shape
        self.prior = np.asarray(prior, dtype=np.float32)
        self.selection = selection
        self.name = "freq"
        self._picked: tuple[Selection, np.ndarray] | None = None

    @classmethod
    def fit(cls, shape: Shape, experts: np.ndarray, rows: np.ndarray | None = None, selection: Selection = Selection(),
            **_: Any) -> FreqPredictor:
        """Fitted on `experts` (read at `rows` when given: the training rows' labels in place)."""
        return cls(shape, expert_prior(experts, shape.num_experts, rows), selection)

    def scores(self, cands: Candidates) -> np.ndarray:
        return np.broadcast_to(self.prior, (len(cands), *self.prior.shape)).copy()

    def select(self, cands: Candidates) -> np.ndarray:
        picked = self._set()
        return np.broadcast_to(picked, (len(cands), *picked.shape[1:]))

    def sets_by_token(self, token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One set, every token's."""
        return self._set(), np.zeros(len(token), dtype=np.int64)

    def _set(self) -> np.ndarray:
        """(1, layers, m) the set of every candidate, selected once per selection."""
        if self._picked is None or self._picked[0] != self.selection:
            self._picked = (self.selection, self.selection.apply(self.prior[None], self.shape.top_k))
        return self._picked[1]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"prior": self.prior}

    def config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_arrays(cls, shape: Shape, selection: Selection, arrays: dict[str, np.ndarray], config: dict[str, Any]) -> FreqPredictor:
        return cls(shape, arrays["prior"], selection)


