"""EAGLE-2 expansion: tree invariants, the draft's scores, and its cache bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tracer.tree import chain, expand_tree


def _setup(pair, n=12, seed=5):
    context = torch.randint(3, 259, (n,), generator=torch.Generator().manual_seed(seed))
    for lm in (pair.target, pair.draft):
        lm.reset()
    root = int(pair.target.extend(context)[-1].argmax())
    pair.draft.extend(context)
    return context, root


@pytest.mark.parametrize("depth,topk,max_nodes", [(1, 1, 1), (3, 2, 5), (4, 3, 60), (5, 4, 16)])
def test_expansion_invariants(pairs, depth, topk, max_nodes):
    pair = pairs["qwen3_moe"]
    context, root = _setup(pair)
    tree = expand_tree(pair.draft, root, depth, topk, max_nodes, pair.target.vocab_size)
    n = len(tree)
    candidates = topk + (depth - 1) * topk * topk
    assert n == 1 + min(max_nodes, candidates)
    assert tree.tokens[0] == root and tree.parents[0] == -1 and tree.depths[0] == 0 and tree.draft_logprob[0] == 0
    assert np.all(tree.parents[1:] < np.arange(1, n)) and np.all(tree.parents[1:] >= 0)
    assert np.all(tree.depths[1:] == tree.depths[tree.parents[1:]] + 1) and tree.depths.max() <= depth
    assert np.all(tree.draft_logprob <= 0)
    for p in set(tree.parents[1:].tolist()):
        kids = tree.tokens[tree.parents == p]
        assert len(set(kids.tolist())) == len(kids) <= topk, "siblings carry distinct tokens"
    assert len(pair.draft) == len(context) + 1, "the draft cache keeps the context plus the root"


def _cum(tree) -> np.ndarray:
    cum = np.zeros(len(tree))
    for i in range(1, len(tree)):
        cum[i] = cum[tree.parents[i]] + float(tree.draft_logprob[i])
    return cum


def test_rerank_keeps_the_best_cumulative_log_probs(pairs):
    """max_nodes keeps the candidates with the highest cumulative draft log-prob (ties: lower id)."""
    pair = pairs["gpt_oss"]
    context, root = _setup(pair)
    full = expand_tree(pair.draft, root, 4, 3, 10_000, pair.target.vocab_size)
    pair.draft.keep(len(context))
    cut = expand_tree(pair.draft, root, 4, 3, 9, pair.target.vocab_size)
    cum = _cum(full)
    best = sorted(range(1, len(full)), key=lambda v: (-cum[v], v))[:9]
    assert sorted(tuple(full.path(v)) for v in best) == sorted(tuple(cut.path(v)) for v in range(1, len(cut)))


def test_draft_logprobs_are_the_drafts_own(pairs):
    """Each node's draft_logprob is log q(token | seq(parent)), recomputed without a tree mask."""
    pair = pairs["mixtral"]  # sliding window 12 < context + depth: exercises the draft's windowed masks
    context, root = _setup(pair, n=14)
    tree = expand_tree(pair.draft, root, 3, 3, 30, pair.target.vocab_size)
    model = pair.draft.model
    for node in range(1, len(tree)):
        seq = torch.cat([context, torch.tensor(tree.path(int(tree.parents[node])))])
        with torch.inference_mode():
            lp = torch.log_softmax(model(seq[None]).logits[0, -1].float(), -1)
        assert tree.draft_logprob[node] == pytest.approx(float(lp[tree.tokens[node]]), abs=1e-4)
    # depth-1 nodes are the root's top-3 tokens
    with torch.inference_mode():
        lp = torch.log_softmax(model(torch.cat([context, torch.tensor([root])])[None]).logits[0, -1].float(), -1)
    assert sorted(tree.tokens[tree.depths == 1].tolist()) == sorted(lp.topk(3).indices.tolist())


def test_frontier_is_the_best_cumulative_nodes(pairs):
    """Only the topk best (by cumulative log-prob) nodes of each layer get children."""
    pair = pairs["olmoe"]
    _, root = _setup(pair)
    topk = 3
    tree = expand_tree(pair.draft, root, 4, topk, 10_000, pair.target.vocab_size)
    cum = _cum(tree)
    for d in range(1, 4):
        layer = np.flatnonzero(tree.depths == d)
        expanded = {int(p) for p in tree.parents[tree.depths == d + 1]}
        best = sorted(layer.tolist(), key=lambda v: (-cum[v], v))[:topk]
        assert expanded == set(best)


def test_chain_helper():
    t = chain([5, 6, 7])
    assert t.parents.tolist() == [-1, 0, 1] and t.path(2) == [5, 6, 7]
    assert t.ancestors().int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
