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


def routing_dtype(num_experts: int) -> np.dtype:
    """The narrowest type of a routing in memory: one byte per expert id where the model has at
    most 256 experts (the format stores int16 and has no pads, so 0..255 is every id), else int16.
    The routing is most of a trace's memory: one byte halves what a replay holds."""
    return np.dtype(np.uint8) if num_experts <= 256 else np.dtype(np.int16)


def narrow_routing(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """`experts` in `routing_dtype(num_experts)` when every id fits it (a trace not yet checked may
    hold ids outside the model: those stay as they are, for the checker to name)."""
    dtype = routing_dtype(num_experts)
    if experts.dtype == dtype or experts.dtype.kind not in "iu":
        return experts
    info = np.iinfo(dtype)
    if experts.size and (experts.min() < info.min or experts.max() > info.max):
        return experts
    return experts.astype(dtype)


@dataclass
class Trace:
    """A whole trace in memory as numpy arrays; `experts` is (rows, moe_layers * top_k) expert ids,
    uint8 where the model has at most 256 experts, else int16 (`routing_dtype`)."""

    path: Path
    manifest: dict[str, Any]
    positions: dict[str, np.ndarray]
    nodes: dict[str, np.ndarray]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        model = self.manifest.get("model") if isinstance(self.manifest, dict) else None
        e = model.get("num_experts") if isinstance(model, dict) else None
        if isinstance(e, int) and not isinstance(e, bool) and e > 0 and "experts" in self.nodes:
            self.nodes = {**self.nodes, "experts": narrow_routing(np.asarray(self.nodes["experts"]), e)}

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
