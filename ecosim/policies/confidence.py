"""`confidence`: EAGLE-2's rerank, the `budget` candidates of highest cumulative draft log-prob."""

from __future__ import annotations

import numpy as np

from ecosim.policies.base import EXACT_FOR_EVERY_BUDGET, Context, Knobs, Policy
from ecosim.policies.knobs import BUDGET
from ecosim.tree import Trees


def select_confidence(trees: Trees, budget: int, rank: np.ndarray | None = None) -> np.ndarray:
    """EAGLE-2's rerank: the root and the `budget` nodes of highest cumulative draft log-prob.

    Ties go to the lower node id. cum_logprob never rises along a path and parent < child, so
    every node's parent ranks before it: the selection is ancestor-closed. `rank` is
    `confidence_rank(trees)` when the caller has it cached (it holds no budget).
    """
    return (trees.depth == 0) | ((confidence_rank(trees) if rank is None else rank) < budget)


def confidence_rank(trees: Trees) -> np.ndarray:
    """Each non-root's rank within its tree by (-cum_logprob, node); roots get n_rows (never chosen).

    Trees of similar size (the usual case) are laid out as a (trees x max nodes) table and sorted
    along each row: one stable sort of short rows, node order keeping ties. Otherwise two stable
    sorts over all rows (`rank_by_sorts`).
    """
    n_max = int(trees.n_nodes.max(initial=0))
    if trees.n_trees * n_max > 2 * trees.n_rows + 1024:
        return rank_by_sorts(trees)
    rank = np.full(trees.n_rows, trees.n_rows, dtype=np.int64)
    valid = np.arange(n_max)[None, :] < trees.n_nodes[:, None]
    rows = np.where(valid, trees.start[:, None] + np.arange(n_max)[None, :], 0)
    ranked = valid & (trees.depth[rows] > 0)
    key = np.where(ranked, -trees.cum_logprob[rows], np.nan)  # NaN (roots, padding) sorts last
    order = np.argsort(key, axis=1, kind="stable")
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n_max)[None, :], axis=1)
    rank[rows[ranked]] = pos[ranked]
    return rank


def rank_by_sorts(trees: Trees) -> np.ndarray:
    """`confidence_rank` by two stable sorts: by -cum_logprob (rows of a tree are in node order, so
    ties stay in node order), then by tree (a radix sort when tree ids fit in 16 bits)."""
    rank = np.full(trees.n_rows, trees.n_rows, dtype=np.int64)
    nonroot = np.flatnonzero(trees.depth > 0)
    order = nonroot[np.argsort(-trees.cum_logprob[nonroot], kind="stable")]
    tree = trees.tree_of_row[order]
    order = order[np.argsort(tree.astype(np.uint16) if trees.n_trees <= 1 << 16 else tree, kind="stable")]
    tree_sorted = trees.tree_of_row[order]
    first = np.searchsorted(tree_sorted, np.arange(trees.n_trees))
    rank[order] = np.arange(len(order)) - first[tree_sorted]
    return rank


def order(ctx: Context, knobs: Knobs) -> tuple[np.ndarray, float]:
    """The rank holds no budget: one sort per trace serves every budget."""
    return ctx.memo("confidence rank", lambda: confidence_rank(ctx.trees)), EXACT_FOR_EVERY_BUDGET


POLICY = Policy("confidence", "EAGLE-2's rerank: the budget nodes of highest cumulative draft log-prob.",
                knobs=(BUDGET,), order=order, budget="budget")
