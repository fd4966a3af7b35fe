"""The trace contract (docs/TRACE_FORMAT.md; version 2 adds `provenance`) as data: files, columns, types."""

from __future__ import annotations

import pyarrow as pa

FORMAT = "ecosim-trace"
VERSION = 2  # written; version 1 (no `provenance`: derived from `synthetic`) is still read
READABLE_VERSIONS = (1, 2)
# Where a trace's routing comes from: a recording, a real continuation with generated rejected
# branches, or the generator alone (docs/TRACE_FORMAT.md, Versions).
PROVENANCES = ("real", "hybrid", "synthetic")
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
