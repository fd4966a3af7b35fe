"""`ecospec-auto` (`ecospec --lambda auto`): the selections of greatest expected tokens per second.

What a user measures is the throughput of the whole run, sum of tokens / sum of seconds over its
steps, not the mean of each step's own rate. With a selection S_i per step (ancestor-closed, the
root included), expected tokens 1 + V(S_i), V(S) = sum over x in S, x != root, of value(x), and
seconds t(S_i), the run's rate is

    R = sum_i (1 + V(S_i)) / sum_i t(S_i).

Dinkelbach's theorem for a ratio of sums: the S_i maximise R exactly when each S_i maximises
(1 + V(S)) - lambda* t(S) with lambda* = R itself. So each step scores its candidates at one
exchange rate, tokens per second, shared by every step, and lambda* is found by iterating
lambda <- R. Here the iteration runs online, as an engine would: each step is scored at the
*running* rate, sum of (1 + V) over sum of t of the steps already chosen (the first step at its
own plain rate 1 / t(root)), and adds its choice to the totals (`rate`). Maximising each step's own
ratio instead (the previous version of this policy) is not the same: a step whose first nodes are
good stops early although its next nodes still earn more than the run's rate, and a poor step
takes nodes that earn less.

value(x) is the probability that x's whole path is accepted (acceptance.py, calibrated node by node
and then tree by tree) and t the CostModel's seconds (marginal.py): each node's predicted new
experts per device (the straggler under ep:N), scaled by how many true new experts a predicted one
has meant at that rank on other requests (union_scale.py), its token's compute, the offload copies
of the experts the cache lacks, and the draft for a step that verifies anything beyond the root.

The growth itself, how one step is solved at a given rate, is the compiled loop of grow.py (its
docstring carries that half of the derivation); this module is what a policy calls.
"""

from __future__ import annotations

import numpy as np

from ecosim.auto.grow import PATIENCE, grow
from ecosim.marginal import StepPricer
from ecosim.predictors.sets import PredictedSets

__all__ = ["PATIENCE", "auto_order", "auto_select", "grow"]


def auto_order(trees, predicted: PredictedSets | np.ndarray, value: np.ndarray, pricer: StepPricer, context: np.ndarray,
               resident: np.ndarray | None = None, only: np.ndarray | None = None,
               patience: int = PATIENCE, visited_only: bool = False, other: np.ndarray | None = None,
               out: tuple[np.ndarray, np.ndarray] | None = None,
               rate: np.ndarray | None = None,
               scale: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(order per row, best prefix per tree) of the auto growth over `trees` (tree.Trees) or the
    trees `only` lists; `predicted` the predicted expert sets (predictors/sets.py; or (rows, layers, m) ids); `value` (rows,) path values;
    `context` (trees,) tokens before each root; `resident` (len(only) or trees, layers, words) the
    offload cache's bits as each tree sees it. `visited_only`: grow only the trees the requests
    visit under this policy (the others keep the root alone; see `grow`).

    A caller growing one tree at a time (the offload trajectory) passes what holds for the whole
    trace once: `other`, `pricer.other(context, max nodes)` of every tree, and `out`, the order
    and best-prefix arrays to write into (only the grown trees' rows are written), and `rate`, the
    running (expected tokens, seconds) of the steps selected so far, which each call reads and adds
    to (a fresh one when None)."""
    sets = PredictedSets.of(predicted)
    ids = np.arange(trees.n_trees) if only is None else np.asarray(only, dtype=np.int64)
    if out is None:
        out = np.full(trees.n_rows, -1, dtype=np.int64), np.zeros(trees.n_trees, dtype=np.int64)
    order, best_k = out
    max_n = int(trees.n_nodes[ids].max(initial=1))
    if pricer.layer.shape[1] < max_n + 2:
        raise ValueError(f"pricer built for {pricer.layer.shape[1] - 2} tokens; trees hold {max_n}")
    if other is None:
        other = pricer.other(context, int(trees.n_nodes.max(initial=1)))
    res = resident if resident is not None else np.zeros((0, sets.table.shape[1], pricer.masks.shape[1]), dtype=np.uint64)
    rate = np.zeros(2) if rate is None else rate
    beta_fold = (None, None) if scale is None else scale
    args = (ids, trees.start, trees.n_nodes, trees.trace.nodes["parent"], value, trees.cum_logprob, sets.table,
            pricer.masks, pricer.layer, pricer.steps, other, pricer.draft, pricer.copy, res, order, best_k, patience)
    if visited_only and only is None:
        end = np.zeros(trees.n_trees, dtype=np.int64)
        for _, sl in trees.request_slices():
            end[sl] = sl.stop
        grow(*args, end, trees.accepted, trees.depth, rate, *beta_fold, sets.index)
    else:
        grow(*args, None, None, None, rate, *beta_fold, sets.index)
    return order, best_k


def auto_select(trees, order: np.ndarray, best_k: np.ndarray) -> np.ndarray:
    """The selection: the root and the first best_k picks of its tree."""
    return (trees.depth == 0) | ((order >= 0) & (order < best_k[trees.tree_of_row]))
