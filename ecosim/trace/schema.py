"""The trace contract (docs/TRACE_FORMAT.md; version 2 adds `provenance`) as data: files, columns, types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

FORMAT = "ecosim-trace"
VERSION = 2  # written; version 1 (no `provenance`: derived from `synthetic`) is still read
SAMPLED_VERSION = 3  # written for a continuation sampled at T > 0 (decoding mode "sample"), which version 2 cannot hold
READABLE_VERSIONS = (1, 2, 3)
# The verification rule under which a sampled trace replays exactly (ecosim/sampling.py): draw the target's token,
# continue into the child that has it; greedy replay's rule on the sampled continuation.
SAMPLED_RULES = ("target-only",)
# Where a trace's routing comes from: a recording, a real continuation with generated rejected
# branches, or the generator alone (docs/TRACE_FORMAT.md, Versions).
PROVENANCES = ("real", "hybrid", "synthetic")
# What a figure computed from each kind of trace is worth: the warning printed under every table
# whose traces are not all real (a real trace needs none).
PROVENANCE_NOTES = {
    "hybrid": "hybrid traces are real on the accepted path and generated elsewhere: "
              "what their rejected branches add (experts, bytes, time) is illustration",
    "synthetic": "synthetic traces are generated, not measured: their figures illustrate the model only",
}


def provenance_notes(kinds: object) -> list[str]:
    """The warning lines for traces of these provenances (an iterable of kinds; `mixed` counts as none)."""
    present = set(kinds)  # type: ignore[call-overload]
    return [note for kind, note in PROVENANCE_NOTES.items() if kind in present]
MANIFEST = "manifest.json"
POSITIONS = "positions.parquet"
NODES = "nodes.parquet"

POSITION_COLUMNS: dict[str, pa.DataType] = {
    "request_id": pa.int32(),
    "pos": pa.int32(),
    "context_len": pa.int32(),
    "n_nodes": pa.int16(),
}

# Scalar node columns; `experts` (and optional `gates`) are fixed-size lists sized by the manifest.
NODE_COLUMNS: dict[str, pa.DataType] = {
    "request_id": pa.int32(),
    "pos": pa.int32(),
    "node": pa.int16(),
    "parent": pa.int16(),
    "depth": pa.int8(),
    "token": pa.int32(),
    "draft_logprob": pa.float32(),
    "target_next": pa.int32(),
    "target_logprob": pa.float32(),
}

MODEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "family": str,
    "num_layers": int,
    "moe_layers": list,
    "num_experts": int,
    "top_k": int,
    "num_shared_experts": int,
    "hidden_size": int,
    "moe_intermediate_size": int,
    "vocab_size": int,
    "expert_bytes": (int, float),
    "dense_bytes": (int, float),
}
MANIFEST_KEYS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "version": int,
    "synthetic": bool,
    "model": dict,
    "draft": dict,
    "tree": dict,
    "decoding": dict,
    "requests": list,
    "recorded_on": dict,
}


def experts_width(model: Mapping[str, Any]) -> int:
    """Experts per node row (a manifest's `model`): one list of top_k per MoE layer, layer-major."""
    return len(model["moe_layers"]) * int(model["top_k"])


def typed_nodes(columns: Mapping[str, Any], width: int) -> dict[str, np.ndarray]:
    """Node columns as the schema's numpy dtypes; `experts` (and `gates`, if given) as (rows, width)."""
    out = {k: np.asarray(columns[k], dtype=t.to_pandas_dtype()) for k, t in NODE_COLUMNS.items()}
    out["experts"] = np.asarray(columns["experts"]).reshape(-1, width).astype(np.int16)
    if "gates" in columns:
        out["gates"] = np.asarray(columns["gates"]).reshape(-1, width).astype(np.float32)
    return out


def empty_nodes(width: int, with_gates: bool = False) -> dict[str, np.ndarray]:
    """No node rows, every column present with its dtype."""
    cols: dict[str, Any] = {k: [] for k in NODE_COLUMNS}
    cols["experts"] = np.zeros((0, width))
    if with_gates:
        cols["gates"] = np.zeros((0, width))
    return typed_nodes(cols, width)


def empty_positions() -> dict[str, np.ndarray]:
    return {k: np.zeros(0, dtype=t.to_pandas_dtype()) for k, t in POSITION_COLUMNS.items()}


def experts_type(width: int) -> pa.DataType:
    return pa.list_(pa.int16(), width)


def gates_type(width: int) -> pa.DataType:
    return pa.list_(pa.float32(), width)


def node_schema(width: int, with_gates: bool) -> pa.Schema:
    fields = [pa.field(k, t, nullable=False) for k, t in NODE_COLUMNS.items()]
    fields.append(pa.field("experts", experts_type(width), nullable=False))
    if with_gates:
        fields.append(pa.field("gates", gates_type(width), nullable=False))
    return pa.schema(fields)


def position_schema() -> pa.Schema:
    return pa.schema([pa.field(k, t, nullable=False) for k, t in POSITION_COLUMNS.items()])
