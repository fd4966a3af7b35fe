"""Engine defaults as baselines, taken from the recorded candidate trees: what that engine's static
tree would verify.

EAGLE-2 expands, level by level up to `depth`, the `topk` best nodes of the level by cumulative
draft log-prob, each into its `topk` best children, then verifies the `total - 1` best of all
expanded nodes (plus the root). `eagle2-default`: total 60, depth 7, top-k 10 (EAGLE-2's published
defaults); `sglang-default`: `--speculative-num-draft-tokens 8 --speculative-eagle-topk 4
--speculative-num-steps 5` (SGLang's EAGLE defaults). `vllm-chain`: the draft's greedy chain of
`num_speculative_tokens` (the budget) tokens. The recorded tree was grown with its own (depth,
topk, max_nodes): where it is smaller than the preset's, the preset gets only what was recorded
(`preset_coverage` says how much of the preset's tree that is). Each drafts its own steps (its
depth; the chain's length), at most the setting's N (base.DRAFTING_RULE), whatever the recorded depth.
"""

from __future__ import annotations

import numpy as np

from ecosim.acceptance import sibling_rank
from ecosim.policies.base import Context, Knobs, Policy
from ecosim.policies.knobs import BUDGET
from ecosim.tree import Trees

EAGLE2_DEFAULT = (60, 7, 10)  # total tokens verified (root included), depth, top-k
SGLANG_DEFAULT = (8, 5, 4)


def eagle_tree(trees: Trees, total: int, depth: int, topk: int) -> np.ndarray:
    """EAGLE-2's static tree (module docstring) over the recorded trees."""
    rank = sibling_rank(trees)
    expanded = trees.depth == 0  # nodes whose children the engine drafts
    eligible = trees.depth == 0
    for d, rows in enumerate(trees.levels, start=1):
        if d > depth:
            break
        ok = expanded[trees.parent_row[rows]] & (rank[rows] < topk)
        eligible[rows] = ok
        cand = rows[ok]  # the level's `topk` best by cumulative log-prob are expanded next
        tree = trees.tree_of_row[cand]
        order = np.lexsort((cand, -trees.cum_logprob[cand], tree))
        place = np.arange(len(order)) - np.searchsorted(tree[order], tree[order])
        expanded[cand[order[place < topk]]] = True
    key = np.where(eligible, trees.cum_logprob, -np.inf)
    nonroot = np.flatnonzero(eligible & (trees.depth > 0))
    order = nonroot[np.lexsort((nonroot, -key[nonroot], trees.tree_of_row[nonroot]))]
    tree = trees.tree_of_row[order]
    place = np.arange(len(order)) - np.searchsorted(tree, tree)
    out = trees.depth == 0
    out[order[place < total - 1]] = True
    return out


def chain(trees: Trees, length: int) -> np.ndarray:
    """The draft's greedy chain: at each depth up to `length`, the favourite child of the last."""
    rank = sibling_rank(trees)
    on = trees.depth == 0
    for d, rows in enumerate(trees.levels, start=1):
        if d > length:
            break
        on[rows] = on[trees.parent_row[rows]] & (rank[rows] == 0)
    return on


def preset_coverage(trees: Trees, selected: np.ndarray, wanted: int) -> float:
    """Mean over positions of the tokens a preset verifies / the `wanted` its engine would verify."""
    return float(trees.selected_count(selected).mean() / wanted)


EAGLE2 = Policy("eagle2-default", "EAGLE-2's default static tree (60 tokens, depth 7, top-k 10) from the recorded tree.",
                select=lambda ctx, knobs: eagle_tree(ctx.trees, *EAGLE2_DEFAULT), steps=lambda knobs: EAGLE2_DEFAULT[1])
SGLANG = Policy("sglang-default", "SGLang's default EAGLE tree (8 draft tokens, top-k 4, 5 steps) from the recorded tree.",
                select=lambda ctx, knobs: eagle_tree(ctx.trees, *SGLANG_DEFAULT), steps=lambda knobs: SGLANG_DEFAULT[1])


def _chain(ctx: Context, knobs: Knobs) -> np.ndarray:
    return chain(ctx.trees, knobs["budget"])


VLLM_CHAIN = Policy("vllm-chain", "vLLM's chain of num_speculative_tokens (the budget) draft tokens: the greedy path.",
                    knobs=(BUDGET,), select=_chain, steps=lambda knobs: knobs["budget"])
