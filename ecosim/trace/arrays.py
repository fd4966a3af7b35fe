"""A trace in memory: its manifest and its position and node columns as numpy arrays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.catalog.models import ModelShape
from ecosim.trace.schema import PROVENANCES, VERSION

# Rows per Parquet row group: pyarrow decodes a whole group of fixed-size lists at once, with
# transients several times its size, so small groups keep reading in bounded memory.
ROW_GROUP = 8192


@dataclass
class Trace:
    """A whole trace in memory as numpy arrays; `experts` is (rows, moe_layers * top_k) int16."""

    path: Path
    manifest: dict[str, Any]
    positions: dict[str, np.ndarray]
    nodes: dict[str, np.ndarray]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    def derived(self, key: str, make: Callable[[], Any]) -> Any:
        """A value computed from this trace's arrays once and kept with it (a predictor's view of
        the draft side, a content fingerprint): the arrays never change after reading."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def synthetic(self) -> bool:
        """Not a measurement throughout (synthetic or hybrid)."""
        return bool(self.manifest["synthetic"])

    @property
    def provenance(self) -> str:
        """real, hybrid or synthetic (version 1 traces: from `synthetic`)."""
        return provenance_of(self.manifest)

    @cached_property
    def model(self) -> ModelShape:
        return ModelShape.from_manifest(self.manifest["model"])

    @cached_property
    def tree_start(self) -> np.ndarray:
        """Row of each tree's root in `nodes`, plus the total row count at the end."""
        return np.concatenate([[0], np.cumsum(self.positions["n_nodes"].astype(np.int64))])

    @property
    def n_trees(self) -> int:
        return len(self.positions["pos"])

    def experts_3d(self) -> np.ndarray:
        """(rows, moe_layers, top_k) view of the routing."""
        m = self.model
        return self.nodes["experts"].reshape(-1, m.num_moe_layers, m.top_k)


def provenance_of(manifest: dict[str, Any]) -> str:
    """A manifest's provenance: version 2's `provenance.kind`, else derived from `synthetic`."""
    p = manifest.get("provenance")
    if manifest.get("version", VERSION) >= 2 and isinstance(p, dict) and p.get("kind") in PROVENANCES:
        return str(p["kind"])
    return "synthetic" if manifest.get("synthetic") else "real"
