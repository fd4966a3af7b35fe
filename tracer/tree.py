"""Candidate trees: EAGLE-2 expansion by the draft, and the ancestor relation the mask is built from.

EAGLE-2 (Li et al., 2024, section 4) grows the tree in `depth` draft forwards. Step 1 runs the
root and takes its `topk` most likely tokens as children. Every later step runs the `topk` nodes of
the newest layer with the highest *cumulative* draft log-prob (the product of q along the path)
in one forward under a tree mask, and gives each its `topk` most likely tokens as children. Then
the whole expansion is reranked: the `max_nodes` nodes with the highest cumulative log-prob are
kept (ties to the lower id). A child never scores above its parent, so what is kept is closed
under ancestors. Parameter names follow SGLang/EAGLE: depth = speculative_num_steps,
topk = eagle_topk, max_nodes = candidates kept below the root (EAGLE-2's total_token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tracer.runner import CachedLM


@dataclass
class Tree:
    """A candidate tree in topological order (parent < node); node 0 is the root."""

    tokens: np.ndarray  # int64 (n,)
    parents: np.ndarray  # int64 (n,), -1 for the root
    depths: np.ndarray  # int64 (n,)
    draft_logprob: np.ndarray  # float32 (n,): log q(token | path to parent); 0 for the root

    def __len__(self) -> int:
        return len(self.tokens)

    def ancestors(self) -> torch.Tensor:
        """(n, n) bool: [i, j] is True when j is i or one of its ancestors (what i attends to)."""
        n = len(self)
        anc = np.zeros((n, n), dtype=bool)
        for i in range(n):
            if self.parents[i] >= 0:
                anc[i] = anc[self.parents[i]]
            anc[i, i] = True
        return torch.from_numpy(anc)

    def path(self, node: int) -> list[int]:
        """Tokens from the root down to `node`, both included."""
        out = []
        while node >= 0:
            out.append(int(self.tokens[node]))
            node = int(self.parents[node])
        return out[::-1]


def chain(tokens: list[int]) -> Tree:
    """A tree that is one path (root first); handy for tests."""
    n = len(tokens)
    return Tree(np.asarray(tokens, np.int64), np.arange(-1, n - 1, dtype=np.int64),
                np.arange(n, dtype=np.int64), np.zeros(n, np.float32))


@torch.inference_mode()
def expand_tree(draft: CachedLM, root: int, depth: int, topk: int, max_nodes: int, vocab: int) -> Tree:
    """EAGLE-2 expansion from `root` after the context cached in `draft`; the cache is left holding
    the context plus the root. Draft tokens are limited to ids below `vocab` (the target's)."""
    ctx = len(draft)
    tokens, parents, depths, logq, cum = [root], [-1], [0], [0.0], [0.0]
    slot: dict[int, int] = {}  # node -> its key's index among the tree keys cached after ctx
    frontier = [0]
    for _ in range(depth):
        cached, f = len(draft) - ctx, len(frontier)
        visible = torch.zeros(f, cached + f, dtype=torch.bool)
        for r, node in enumerate(frontier):
            a = parents[node]
            while a >= 0:
                visible[r, slot[a]] = True
                a = parents[a]
            visible[r, cached + r] = True
            slot[node] = cached + r
        pos = torch.tensor([ctx + depths[v] for v in frontier], dtype=torch.long)
        logits = draft.forward(torch.tensor([tokens[v] for v in frontier]), pos, visible, ctx)
        lp = torch.log_softmax(logits.float(), dim=-1)[:, :vocab]
        top_lp, top_tok = (t.cpu().tolist() for t in lp.topk(topk, dim=-1))
        new = []
        for r, node in enumerate(frontier):
            for j in range(topk):
                tokens.append(int(top_tok[r][j]))
                parents.append(node)
                depths.append(depths[node] + 1)
                logq.append(min(0.0, float(top_lp[r][j])))
                cum.append(cum[node] + logq[-1])
                new.append(len(tokens) - 1)
        frontier = sorted(new, key=lambda v: (-cum[v], v))[:topk]
    draft.keep(ctx + 1)  # the root's key stays: it is part of the next position's context
    keep = [0] + sorted(sorted(range(1, len(tokens)), key=lambda v: (-cum[v], v))[:max_nodes])
    new_id = {old: i for i, old in enumerate(keep)}
    return Tree(
        np.asarray([tokens[v] for v in keep], np.int64),
        np.asarray([new_id[parents[v]] if v else -1 for v in keep], np.int64),
        np.asarray([depths[v] for v in keep], np.int64),
        np.asarray([logq[v] for v in keep], np.float32),
    )
