"""Predicted expert sets of a trace's node rows: the distinct sets, and each row's index into them.

A predictor that conditions on the candidate's token alone (`token`, `freq`) predicts one set per
token and fold: a few thousand distinct sets for 10^5-10^6 node rows (4,097 per fold for the
610,000 rows of the bench's DeepSeek-V3.1 trace). Held row by row, as (rows, layers, m) ids, those
predictions took as much memory as the routing itself; held as the sets and an index they take a
few MB. A predictor that predicts row by row (`context`, the oracle) is its own table, with the
identity index, and a slice of it is a view.

The cost-aware policies read a row's set as `table[index[row]]`: the compiled growth and counts
index through `index`, and `ecospec` offsets each set once and gathers a chunk of trees' rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass(frozen=True)
class PredictedSets:
    """`table` (sets, layers, m) expert ids, -1 pads; `index` (rows,) int64, the set of each row,
    or None when the table holds one set per row (the identity)."""

    table: np.ndarray
    index: np.ndarray | None = None

    @classmethod
    def of(cls, predicted: PredictedSets | np.ndarray) -> PredictedSets:
        """`predicted` as sets: an array of one set per row is its own table."""
        return predicted if isinstance(predicted, PredictedSets) else cls(np.asarray(predicted))

    def dense(self) -> np.ndarray:
        """(rows, layers, m) every row's set: a copy unless the table is row by row."""
        return self.table if self.index is None else self.table[self.index]


@njit(cache=True, inline="always")
def set_of(index, r):  # pragma: no cover - compiled
    """In compiled code: the entry of the sets that row r reads, `index[r]`, or r itself when each
    row is its own set (`index` None)."""
    if index is None:
        return r
    return index[r]
