"""tracer: records EcoSim traces from real MoE models (torch + transformers).

`tracer record` loads a target and a draft, expands an EAGLE-2 candidate tree at every position of
the target's greedy continuation, verifies the whole tree in one target forward with a tree
attention mask, captures the routing with forward hooks on the routers, and writes the trace
through `ecosim.trace.write_trace` (see docs/TRACE_FORMAT.md). Imports flow one way:
tracer imports ecosim, never the reverse.
"""
