"""What a predictor sees of a chunk of candidate nodes (the input of `ScoringPredictor.scores`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class Candidates:
    """A chunk of candidate nodes as the draft side sees them (the input of `scores`).

    token, parent_token (-1 where unknown: a root at pos 0 without prompt ids) and depth are (n,)
    int64. parent_experts is (n, layers, m) int16: the parent's predicted set, for a root the
    previous position's true set; prev_experts (n, layers, k) int16: the previous position's true
    experts, -1 at pos 0. Either may be given as a function that builds it on first use, so a
    predictor that ignores them does not pay for gathering them. draft_logprob (n,) float32 is the
    draft's log-probability of the token (the trace's draft-side score), when known.
    """

    def __init__(self, token: np.ndarray, parent_token: np.ndarray, depth: np.ndarray,
                 parent_experts: np.ndarray | Callable[[], np.ndarray],
                 prev_experts: np.ndarray | Callable[[], np.ndarray], draft_logprob: np.ndarray | None = None):
        self.token, self.parent_token, self.depth = token, parent_token, depth
        self._parent, self._prev = parent_experts, prev_experts
        self.draft_logprob = draft_logprob

    @property
    def parent_experts(self) -> np.ndarray:
        if callable(self._parent):
            self._parent = self._parent()
        return self._parent

    @property
    def prev_experts(self) -> np.ndarray:
        if callable(self._prev):
            self._prev = self._prev()
        return self._prev

    def __len__(self) -> int:
        return len(self.token)
