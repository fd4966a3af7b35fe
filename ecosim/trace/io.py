"""Reading and writing trace directories: Parquet via pyarrow, validated, written atomically.

The concepts live in their own modules: the in-memory `Trace` (arrays.py), reading and checking,
whole or in chunks of requests (read.py), and the atomic write (write.py). This module keeps the
names every caller imports from `ecosim.trace.io`.
"""

from __future__ import annotations

from ecosim.trace.arrays import ROW_GROUP, Trace, provenance_of
from ecosim.trace.read import (
    check_trace,
    find_traces,
    iter_node_batches,
    iter_request_chunks,
    read_manifest,
    read_trace,
    row_bytes,
    scan_nodes,
)
from ecosim.trace.write import full_manifest, write_trace

__all__ = [
    "ROW_GROUP", "Trace", "check_trace", "find_traces", "full_manifest", "iter_node_batches", "iter_request_chunks",
    "provenance_of", "read_manifest", "read_trace", "row_bytes", "scan_nodes", "write_trace",
]
