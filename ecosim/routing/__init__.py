"""Routing sequences (real, hybrid, synthetic): storage, importers and statistics."""

from ecosim.routing.data import Routing, read_routing, trace_continuation, write_routing

__all__ = ["Routing", "read_routing", "trace_continuation", "write_routing"]
