"""A trace's candidate trees cut to a depth: what a setting that drafts fewer steps than were recorded sees.

A trace records, at every position, the draft's expansion to the recorded depth R (the manifest's
`tree.depth`). An engine drafting N <= R steps per verification (SGLang `--speculative-num-steps`,
vLLM `num_speculative_tokens`, llama.cpp `--draft-max`) builds the same tree cut at depth N: the
nodes of depth <= N, with the same tokens, draft log-probs, verdicts and routing (tree attention:
a node's routing depends only on its ancestors, all kept). So the recorded trace serves every
N <= R, and `--draft-steps N` replays `truncate(trace, N)`, whose manifest says depth N (and the
depth it was cut from, `tree.recorded_depth`), so the cost model prices N draft steps.
"""

from __future__ import annotations

import copy

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.trace.arrays import Trace


def recorded_depth(trace: Trace) -> int:
    """The depth the trace's trees were drafted to (its manifest's `tree.depth`)."""
    return int(trace.manifest["tree"].get("depth", 0))


def check_steps(trace: Trace, steps: int) -> None:
    """A one-line error unless 1 <= steps <= the recorded depth (a setting cannot draft deeper than was recorded)."""
    depth = recorded_depth(trace)
    if steps < 1:
        raise EcoSimError(f"--draft-steps must be >= 1, got {steps} (speculation off is the policy ar)")
    if steps > depth:
        raise EcoSimError(f"--draft-steps {steps}: trace {trace.name} records trees of depth {depth}; a setting "
                          "cannot draft deeper than was recorded (record deeper trees)")


def truncate(trace: Trace, depth: int) -> Trace:
    """The trace with every candidate tree cut to `depth` (nodes of depth <= depth, ids renumbered
    in order so they stay 0..n-1 and topological), its manifest's `tree.depth` set to `depth`.
    The recorded depth returns the trace itself; below 1 or above the recorded depth is refused
    (check_steps). Works on a manifest-only view (no rows) and on request chunks."""
    check_steps(trace, depth)
    if depth == recorded_depth(trace):
        return trace
    manifest = copy.deepcopy(trace.manifest)
    manifest["tree"]["recorded_depth"] = int(trace.manifest["tree"].get("recorded_depth", recorded_depth(trace)))
    manifest["tree"]["depth"] = int(depth)
    if not trace.nodes:  # a manifest-only view (a streamed replay's labels and cost model)
        return Trace(trace.path, manifest, trace.positions, trace.nodes)
    keep = trace.nodes["depth"].astype(np.int64) <= depth
    start = trace.tree_start
    n_trees = trace.n_trees
    tree_of_row = np.repeat(np.arange(n_trees), trace.positions["n_nodes"].astype(np.int64))
    kept_per_tree = np.bincount(tree_of_row[keep], minlength=n_trees)
    # new id of each kept node: its rank among the kept rows of its tree (ids are in row order)
    new_start = np.concatenate([[0], np.cumsum(kept_per_tree)])
    rank = np.cumsum(keep) - 1  # global rank among kept rows
    new_id = np.full(len(keep), -1, dtype=np.int64)
    new_id[keep] = rank[keep] - new_start[tree_of_row[keep]]
    parent = trace.nodes["parent"].astype(np.int64)
    parent_row = np.where(parent < 0, -1, start[tree_of_row] + parent)
    nodes = {k: v[keep] for k, v in trace.nodes.items()}
    pr = parent_row[keep]
    nodes["node"] = new_id[keep].astype(trace.nodes["node"].dtype)
    nodes["parent"] = np.where(pr < 0, -1, new_id[np.maximum(pr, 0)]).astype(trace.nodes["parent"].dtype)
    positions = dict(trace.positions)
    positions["n_nodes"] = kept_per_tree.astype(trace.positions["n_nodes"].dtype)
    return Trace(trace.path, manifest, positions, nodes)
