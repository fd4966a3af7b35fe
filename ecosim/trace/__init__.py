"""Trace directories (format version 1): schema, invariant checks, reading and atomic writing."""

from ecosim.trace.checks import TraceChecker, TraceError, check_manifest
from ecosim.trace.cut import check_steps, recorded_depth, truncate
from ecosim.trace.io import Trace, check_trace, find_traces, iter_node_batches, read_trace, scan_nodes, write_trace

__all__ = [
    "Trace",
    "TraceChecker",
    "TraceError",
    "check_manifest",
    "check_steps",
    "check_trace",
    "find_traces",
    "iter_node_batches",
    "read_trace",
    "recorded_depth",
    "scan_nodes",
    "truncate",
    "write_trace",
]
