"""Real speculative decoding with a selection policy, and plain greedy decoding (the reference).

One step at position `pos`, with the context (prompt + tokens before `pos`) in both KV caches:

    draft   expand the tree from the root (tracer.tree.expand_tree: EAGLE-2, as recorded), the
            tokens accepted last step fed to the draft in its first forward [ar: the root alone]
    select  the policy picks a subtree of it (live.Selector: ecosim's select_* functions)
    verify  one target forward over the selected nodes only, tree attention mask, routing
            captured by the tracer's router hooks; each node's next token is the target's argmax, or
            at T > 0 its draw (tracer.sampler: the random number of the generated index it fills);
            a child is accepted iff its parent is and its token is the parent's next token (greedy
            acceptance; at T > 0 target-only verification, ecosim/sampling.py); the accepted path's
            keys are moved to the front of the new cache entries and the rest dropped

and the step yields the root plus the accepted tokens; the next token after the deepest accepted node
is the next root. Each phase is timed with the clock (synchronised on CUDA). This is lossless: the
tokens equal `plain()`'s, greedy or sampled with the same seed, which `measure` checks for every policy.
Target-only verification is lossless for any tree, so at T > 0 the output is distributed as the
target's own samples (`validate sampling-check` tests the distribution with independent seeds).

tracer.verify.verify_tree keeps only the root in the cache (the recorder moves one position at a
time); a decoder keeps the whole accepted path, so `verify_subtree` + `keep_path` here wrap
tracer's CachedLM and RouterCapture instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from tracer.pair import Pair
from tracer.routing import RouterCapture
from tracer.runner import CachedLM
from tracer.sampler import Sampler
from tracer.tree import Tree, chain, expand_tree
from validate.clock import Clock
from validate.live import Prev, Selector


@dataclass
class Step:
    """One verification step as measured."""

    request: int
    pos: int  # position of the root (tokens generated before the step)
    context: int  # tokens in the target's cache before the step (prompt + pos)
    tree_nodes: int  # nodes of the live draft tree, root included (1 for ar)
    verified: int  # nodes the target verified (the selected subtree, root included)
    accepted: int  # depth of the deepest accepted node
    tokens: int  # tokens the step yields (accepted + 1, cut at the end of the request)
    union: list[int]  # distinct experts the verify forward routed to, per MoE layer (router hooks)
    draft_s: float
    select_s: float
    verify_s: float
    tree_in_trace: bool | None = None  # oracle predictor: the recorded tree held every live node
    peeked: bool = False  # oracle predictor: true experts came from an untimed forward instead

    @property
    def seconds(self) -> float:
        return self.draft_s + self.select_s + self.verify_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Decoded:
    tokens: list[int]
    steps: list[Step]


def subtree(tree: Tree, mask: np.ndarray) -> tuple[Tree, np.ndarray]:
    """The selected nodes as a Tree (renumbered, same order) and their ids in `tree`."""
    idx = np.flatnonzero(mask)
    if len(idx) == 0 or idx[0] != 0:
        raise ValueError("a selection must contain the root")
    new = np.full(len(tree), -1, dtype=np.int64)
    new[idx] = np.arange(len(idx))
    par = tree.parents[idx]
    if (par[1:] < 0).any() or (new[par[1:]] < 0).any():
        raise ValueError("a selection must be closed under ancestors")
    parents = np.where(par >= 0, new[np.maximum(par, 0)], -1)
    return Tree(tree.tokens[idx], parents, tree.depths[idx], tree.draft_logprob[idx]), idx


def accept_path(sub: Tree, target_next: np.ndarray) -> list[int]:
    """Node ids (in `sub`) of the accepted chain, root first: a child is accepted iff its parent is and its token
    is the parent's `target_next` (the argmax, or at T > 0 the target's draw: target-only verification)."""
    n = len(sub)
    ok = np.zeros(n, dtype=bool)
    ok[0] = True
    deepest = 0
    for i in range(1, n):
        p = int(sub.parents[i])
        if ok[p] and sub.tokens[i] == target_next[p]:
            ok[i] = True
            if sub.depths[i] > sub.depths[deepest]:
                deepest = i
    path = []
    while deepest >= 0:
        path.append(deepest)
        deepest = int(sub.parents[deepest])
    return path[::-1]


Draw = Callable[[torch.Tensor, np.ndarray], np.ndarray]  # (logits (n, vocab), depths) -> next token per node


@torch.inference_mode()
def verify_subtree(target: CachedLM, capture: RouterCapture, sub: Tree, draw: Draw | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """One target forward over `sub` after the cached context: (next token per node: the argmax, or `draw`'s,
    experts (n, layers, k)). The cache is left holding context + every node of `sub`; `keep_path` trims it."""
    ctx = len(target)
    pos = torch.from_numpy(sub.depths) + ctx
    with capture.capture():
        logits = target.forward(torch.from_numpy(sub.tokens), pos, sub.ancestors(), ctx)
    experts, _ = capture.collect()
    if draw is not None:
        return draw(logits, sub.depths), experts
    return logits.argmax(dim=-1).cpu().numpy(), experts


@torch.inference_mode()
def keep_path(lm: CachedLM, ctx: int, path: list[int]) -> None:
    """Keep the context and the keys of `path` (indices among the entries after `ctx`), in order."""
    d = len(path)
    if path != list(range(d)):
        idx = torch.tensor(path, dtype=torch.long, device=lm.device) + ctx
        for layer in lm.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                t[..., ctx : ctx + d, :] = t.index_select(-2, idx)
        lm.key_pos[ctx : ctx + d] = lm.key_pos[idx]
    lm.keep(ctx + d)


class Fed:
    """A CachedLM seen by tracer.tree.expand_tree as if `pending` tokens were already cached.

    expand_tree's first forward feeds the root alone; through this wrapper that forward feeds the
    tokens accepted last step *and* the root, causally, in one call (only the root's logits are
    computed), as EAGLE-style decoders do. So a draft step is always `depth` forwards, whatever the
    number of accepted tokens, which is what the cost model charges (one draft time per step).
    """

    def __init__(self, lm: CachedLM, pending: list[int]):
        self.lm, self.pending = lm, list(pending)

    def __len__(self) -> int:
        return len(self.lm) + len(self.pending)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, visible_tail: torch.Tensor, tail_start: int,
                last_only: bool = False) -> torch.Tensor:
        if not self.pending:
            return self.lm.forward(ids, pos, visible_tail, tail_start, last_only)
        start, p = len(self.lm), len(self.pending)
        if len(ids) != 1 or tail_start != start + p:
            raise RuntimeError("Fed: the first forward must be the root alone, after the context")
        ids = torch.cat([torch.tensor(self.pending, dtype=ids.dtype), ids.cpu()])
        pos = torch.arange(start, start + p + 1, dtype=torch.long)
        self.pending = []
        return self.lm.forward(ids, pos, torch.ones(p + 1, p + 1, dtype=torch.bool).tril(), start, last_only=True)

    def keep(self, n: int) -> None:
        if self.pending:
            raise RuntimeError("Fed: keep before the first forward")
        self.lm.keep(n)


def draft_tree(draft: CachedLM, pending: list[int], root: int, depth: int, topk: int, max_nodes: int, vocab: int) -> Tree:
    """EAGLE-2 expansion (tracer.tree.expand_tree) from `root`, the accepted `pending` tokens fed in
    its first forward; the draft's cache is left holding the context, `pending` and the root."""
    return expand_tree(Fed(draft, pending) if pending else draft, root, depth, topk, max_nodes, vocab)  # type: ignore[arg-type]


def union_sizes(experts: np.ndarray, num_experts: int) -> list[int]:
    """Distinct experts per layer of (n, layers, k) routed ids."""
    n, layers, k = experts.shape
    hit = np.zeros((layers, num_experts), dtype=bool)
    hit[np.broadcast_to(np.arange(layers)[None, :, None], experts.shape), experts.astype(np.int64)] = True
    return hit.sum(axis=1).tolist()


def greedy(model: Any, prompt: list[int], max_new_tokens: int, eos_ids: frozenset[int], stop_at_eos: bool = True) -> list[int]:
    """Plain greedy decoding with the model's own causal masks and a fresh cache: the reference at T = 0."""
    return plain(model, prompt, max_new_tokens, eos_ids, stop_at_eos)


@torch.inference_mode()
def plain(model: Any, prompt: list[int], max_new_tokens: int, eos_ids: frozenset[int], stop_at_eos: bool = True,
          sampler: Sampler = Sampler(), request: int = 0) -> list[int]:
    """Plain decoding with the model's own causal masks and a fresh cache, one token a forward: the reference.
    Generated index n is `sampler`'s draw with u(seed, request, n) (the argmax at T = 0)."""
    from transformers import DynamicCache

    dev = model.get_input_embeddings().weight.device
    cache = DynamicCache()
    ids = torch.tensor([prompt], dtype=torch.long, device=dev)
    out: list[int] = []
    while len(out) < max_new_tokens:
        o = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        cache = o.cache
        t = int(sampler.draw(o.logits[0, -1:], request, np.array([len(out)]))[0])
        if stop_at_eos and t in eos_ids:
            break
        out.append(t)
        ids = torch.tensor([[t]], dtype=torch.long, device=dev)
    return out


class SpecDecoder:
    """Decodes requests with one selection policy at a time on a loaded pair."""

    def __init__(self, pair: Pair, clock: Clock, depth: int, topk: int, max_nodes: int, max_new_tokens: int,
                 stop_at_eos: bool = True, sampler: Sampler = Sampler()):
        self.pair, self.clock, self.sampler = pair, clock, sampler
        self.depth, self.topk, self.max_nodes = depth, topk, max_nodes
        self.max_new_tokens, self.stop_at_eos = max_new_tokens, stop_at_eos
        self.num_experts = pair.shape.num_experts
        self.width = pair.shape.num_moe_layers * pair.shape.top_k

    @torch.inference_mode()
    def peek(self, tree: Tree) -> np.ndarray:
        """True experts (n, width) of every node of `tree`: a forward whose cache entries are dropped."""
        tgt = self.pair.target
        ctx = len(tgt)
        with self.pair.capture.capture():
            tgt.forward(torch.from_numpy(tree.tokens), torch.from_numpy(tree.depths) + ctx, tree.ancestors(), ctx)
        experts, _ = self.pair.capture.collect()
        tgt.keep(ctx)
        return experts.reshape(len(tree), self.width)

    def decode(self, selector: Selector, rid: int, prompt: list[int]) -> Decoded:
        """Generate up to max_new_tokens tokens of request `rid` with `selector`'s policy."""
        p, clock = self.pair, self.clock
        tgt, dr = p.target, p.draft
        speculative = selector.spec.speculative
        ids = torch.tensor(prompt, dtype=torch.long)
        tgt.reset()
        root = int(self.sampler.draw(tgt.extend(ids)[-1:], rid, np.zeros(1, np.int64))[0])
        if speculative:
            dr.reset()
            dr.extend(ids)
        manifest = selector.manifest(rid, prompt)
        selector.begin(rid)
        out: list[int] = []
        steps: list[Step] = []
        pending: list[int] = []
        prev: Prev | None = None
        pos = 0
        while pos < self.max_new_tokens:
            if self.stop_at_eos and root in p.eos_ids:
                break
            ctx = len(tgt)
            t0 = clock.now()
            if speculative:
                tree = draft_tree(dr, pending, root, self.depth, self.topk, self.max_nodes, tgt.vocab_size)
            else:
                tree = chain([root])
            t1 = clock.now()
            true, in_trace, peeked, paused = None, None, False, 0.0
            if selector.needs_true_experts:
                true = selector.true_experts(rid, pos, tree.tokens, tree.parents)
                in_trace = true is not None
                if true is None:  # the recorded tree lacks a live node: peek, off the clock
                    a = clock.now()
                    true = self.peek(tree)
                    peeked = True
                    paused = clock.now() - a
            mask = selector.select(manifest, rid, tree.tokens, tree.parents, tree.depths, tree.draft_logprob, prev, true)
            sub, _ = subtree(tree, mask)
            t2 = clock.now()
            # a node at depth d fills generated index pos + d + 1: its draw uses that index's random number
            draw = None if self.sampler.greedy else (lambda lg, d, at=pos: self.sampler.draw(lg, rid, at + 1 + d))
            nxt, experts = verify_subtree(tgt, p.capture, sub, draw)
            path = accept_path(sub, nxt)
            keep_path(tgt, ctx, path)
            t3 = clock.now()
            toks = sub.tokens[path].tolist()
            produced, stop = toks, False
            if self.stop_at_eos:
                for j, t in enumerate(toks):
                    if t in p.eos_ids:
                        produced, stop = toks[:j], True
                        break
            produced = produced[: self.max_new_tokens - pos]
            out.extend(produced)
            steps.append(Step(rid, pos, ctx, len(tree), len(sub), len(path) - 1, len(produced),
                              union_sizes(experts, self.num_experts), t1 - t0, t2 - t1 - paused, t3 - t2,
                              in_trace, peeked))
            pos += len(produced)
            if stop:
                break
            root = int(nxt[path[-1]])
            pending = toks[1:]
            prev = Prev(toks[-1], experts[path[-1]].reshape(self.width))
        return Decoded(out, steps)
