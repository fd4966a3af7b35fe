"""Candidate-tree arithmetic over a whole trace at once: paths, acceptance, accepted chains.

Everything here is per node row (the rows of `nodes.parquet`) and vectorised over all trees.
Node ids are topological within a tree (`parent < node`), so quantities defined along a path
(cumulative draft log-prob, greedy acceptance) are filled level by level, one depth at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ecosim.trace.io import Trace


@dataclass
class Trees:
    """Derived per-row and per-tree arrays of one trace (read-only after construction)."""

    trace: Trace

    @cached_property
    def start(self) -> np.ndarray:
        """Row of each tree's root; `start[t] + node` is a node's row."""
        return self.trace.tree_start[:-1]

    @cached_property
    def n_nodes(self) -> np.ndarray:
        return self.trace.positions["n_nodes"].astype(np.int64)

    @property
    def n_trees(self) -> int:
        return len(self.start)

    @property
    def n_rows(self) -> int:
        return int(self.trace.tree_start[-1])

    @cached_property
    def tree_of_row(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_trees), self.n_nodes)

    @cached_property
    def node(self) -> np.ndarray:
        return self.trace.nodes["node"].astype(np.int64)

    @cached_property
    def depth(self) -> np.ndarray:
        return self.trace.nodes["depth"].astype(np.int64)

    @cached_property
    def parent_row(self) -> np.ndarray:
        """Global row of each node's parent; the root points at itself."""
        parent = self.trace.nodes["parent"].astype(np.int64)
        own = self.start[self.tree_of_row]
        return np.where(parent < 0, np.arange(self.n_rows), own + parent)

    @cached_property
    def levels(self) -> list[np.ndarray]:
        """Rows at each depth 1, 2, ...: parents always sit in an earlier level."""
        order = np.argsort(self.depth, kind="stable")
        bounds = np.searchsorted(self.depth[order], np.arange(1, int(self.depth.max(initial=0)) + 2))
        return [order[bounds[d] : bounds[d + 1]] for d in range(len(bounds) - 1)]

    @cached_property
    def cum_logprob(self) -> np.ndarray:
        """Sum of `draft_logprob` along the path from the root (0 at the root), float64."""
        cum = self.trace.nodes["draft_logprob"].astype(np.float64).copy()
        for rows in self.levels:
            cum[rows] += cum[self.parent_row[rows]]
        return cum

    @cached_property
    def accepted(self) -> np.ndarray:
        """Greedy verdict: the root is accepted; a child iff its parent is and token == parent.target_next."""
        tok, nxt = self.trace.nodes["token"], self.trace.nodes["target_next"]
        acc = self.depth == 0
        for rows in self.levels:
            p = self.parent_row[rows]
            acc[rows] = acc[p] & (tok[rows] == nxt[p])
        return acc

    @cached_property
    def accept_len(self) -> np.ndarray:
        """A(p): depth of the deepest accepted node of the full candidate tree, per tree."""
        out = np.zeros(self.n_trees, dtype=np.int64)
        np.maximum.at(out, self.tree_of_row[self.accepted], self.depth[self.accepted])
        return out

    @cached_property
    def chain(self) -> np.ndarray:
        """(trees, max A + 1) rows of the accepted chain by depth; -1 past A(p). Siblings carry
        distinct tokens, so each depth holds at most one accepted node."""
        out = np.full((self.n_trees, int(self.accept_len.max(initial=0)) + 1), -1, dtype=np.int64)
        rows = np.flatnonzero(self.accepted)
        out[self.tree_of_row[rows], self.depth[rows]] = rows
        return out

    def selected_accept_len(self, selected: np.ndarray) -> np.ndarray:
        """Accepted length of a selection: depth of its deepest accepted node, per tree."""
        hit = selected & self.accepted
        out = np.zeros(self.n_trees, dtype=np.int64)
        np.maximum.at(out, self.tree_of_row[hit], self.depth[hit])
        return out

    def selected_depth(self, selected: np.ndarray) -> np.ndarray:
        """Depth of a selection's deepest node, per tree (0: the root alone)."""
        out = np.zeros(self.n_trees, dtype=np.int64)
        np.maximum.at(out, self.tree_of_row[selected], self.depth[selected])
        return out

    def selected_count(self, selected: np.ndarray) -> np.ndarray:
        """Tokens verified per tree (root included)."""
        return np.bincount(self.tree_of_row[selected], minlength=self.n_trees)

    def request_slices(self) -> list[tuple[int, slice]]:
        """(request_id, slice of trees) per request, in trace order."""
        req = self.trace.positions["request_id"]
        cuts = np.flatnonzero(np.diff(req)) + 1
        bounds = np.concatenate([[0], cuts, [len(req)]])
        return [(int(req[a]), slice(int(a), int(b))) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
