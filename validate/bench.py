"""The calibration's microbenchmarks on a loaded pair: the live verify and draft phases, forced routing.

`ModelBench` implements `calibrate.Bench`. Routing is forced by a forward hook on every router of
the target, registered *before* the tracer's capture hook (`prepend=True`): it replaces the
router's (logits, weights, indices) with the chosen indices and uniform weights, so the experts
module runs exactly the chosen experts, and the capture hook (which the timed verify phase runs,
as in decoding) records them. The hook is idle outside `run_verify`, so the draft (which may share
the routers, as an early-exit view does) is never forced.

The bench keeps its own KV caches (a `CachedLM` per model and context length, over the pair's
weights), so its contexts survive the decoder's use of the pair's caches: `validate run` can
interleave calibration runs with decoding rounds without prefilling again. A head draft (EAGLE-3,
MTP) gets its own cache bound to the bench's target cache, whose features it reads; before a timed
draft phase the target runs (untimed) over the accepted tokens the head is fed, as decoding's
verification would have.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from ecosim.policies import PolicySpec
from tracer.drafts.heads import HeadLM
from tracer.pair import Pair
from tracer.runner import CachedLM
from tracer.tree import Tree
from validate.decode import draft_tree, keep_path, verify_subtree
from validate.live import Prev, Selector


def fork(pair: Pair) -> tuple[CachedLM, Any]:
    """Fresh caches over the pair's weights: the target's (keeping the feature tap a head draft reads)
    and the draft's; a head draft (EAGLE-3, MTP) is re-bound to the new target, whose features it reads."""
    target = CachedLM(pair.target.model, pair.target.windows)
    target.tap = pair.target.tap
    if isinstance(pair.draft, HeadLM):
        draft = copy.copy(pair.draft)
        draft.target = target
        draft.reset()
    else:
        draft = CachedLM(pair.draft.model, pair.draft.windows)
    return target, draft


class ModelBench:
    """Verify and draft phases of `validate.decode`, after contexts cut from a text (or random)."""

    def __init__(self, pair: Pair, depth: int, topk: int, max_nodes: int, budget: int, seed: int = 0,
                 text: list[int] | None = None):
        self.pair, self.shape = pair, pair.shape
        # a token stream (prompts and their continuations) for the contexts and the draft's roots:
        # the draft's trees, and a MoE draft's routing, then look like decoding's; random otherwise
        self.text = list(text or [])
        self.depth, self.topk, self.max_nodes = depth, topk, max_nodes
        self.rng = np.random.default_rng(seed + 1)
        self.vocab = pair.target.vocab_size
        self.selector = Selector(PolicySpec("confidence", budget, 0.0, "none"), pair.shape)
        self._forced: list[torch.Tensor] | None = None
        self._handles = [r.register_forward_hook(self._hook(j), prepend=True) for j, (_, r) in enumerate(pair.capture.routers)]
        self._contexts: dict[int, tuple[CachedLM, CachedLM, int]] = {}  # length -> (target, draft, text offset)
        self.ctx, self.offset = 0, -1
        self.target: CachedLM = pair.target
        self.draft: CachedLM = pair.draft
        self.sub: Tree | None = None
        self.path: list[int] = []

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._contexts.clear()

    def _hook(self, j: int):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
            if self._forced is None:
                return None
            logits, weights, idx = output
            forced = self._forced[j]
            return logits, torch.full(forced.shape, 1.0 / forced.shape[1], dtype=weights.dtype, device=weights.device), forced

        return hook

    def _tokens(self, n: int) -> torch.Tensor:
        bad = set(self.pair.eos_ids)
        ids = self.rng.integers(0, self.vocab, size=n)
        ids = np.where(np.isin(ids, list(bad)), (ids + 1) % self.vocab, ids)
        return torch.from_numpy(ids.astype(np.int64))

    @torch.inference_mode()
    def set_context(self, tokens: int) -> None:
        """Use the caches holding a context of `tokens` tokens (prefilled on first use)."""
        if tokens not in self._contexts:
            room = len(self.text) - tokens - 8
            if room >= 0:
                offset = int(self.rng.integers(0, room + 1))
                ids = torch.tensor(self.text[offset : offset + tokens], dtype=torch.long)
            else:
                offset, ids = -1, self._tokens(tokens)
            target, draft = fork(self.pair)
            target.extend(ids)  # first: a head draft reads the target's features of the context
            draft.extend(ids)
            self._contexts[tokens] = (target, draft, offset)
        self.target, self.draft, self.offset = self._contexts[tokens]
        self.ctx = tokens

    def prepare_verify(self, experts: np.ndarray, parents: np.ndarray | None = None) -> None:
        n = experts.shape[0]
        if parents is None:
            parents = np.array([-1] + [int(self.rng.integers(0, i)) for i in range(1, n)], dtype=np.int64)
        parents = np.asarray(parents, dtype=np.int64)
        depths = np.zeros(n, dtype=np.int64)
        for i in range(1, n):
            depths[i] = depths[parents[i]] + 1
        self.sub = Tree(self._tokens(n).numpy(), parents, depths, np.zeros(n, np.float32))
        node, path = int(np.argmax(depths)), []
        while node >= 0:
            path.append(node)
            node = int(parents[node])
        self.path = path[::-1]
        dev = self.target.device
        self._experts = [torch.from_numpy(np.ascontiguousarray(experts[:, j, :])).to(dev) for j in range(experts.shape[1])]

    def run_verify(self) -> None:
        self._forced = self._experts
        try:
            _, seen = verify_subtree(self.target, self.pair.capture, self.sub)
            keep_path(self.target, self.ctx, self.path)
        finally:
            self._forced = None
        self._seen = seen

    def after_verify(self) -> None:
        self.target.keep(self.ctx)
        want = np.stack([e.cpu().numpy() for e in self._experts], axis=1)
        if not np.array_equal(np.sort(self._seen, axis=-1), np.sort(want, axis=-1)):
            raise RuntimeError("forced routing did not reach the experts module (router hook not honoured)")

    def prepare_draft(self, accepted: int) -> None:
        if self.offset >= 0:  # the tokens that follow the context in the stream
            nxt = self.text[self.offset + self.ctx : self.offset + self.ctx + accepted + 1]
            self.pending, self.root = nxt[:-1], nxt[-1]
        else:
            self.pending = self._tokens(accepted).tolist()
            self.root = int(self._tokens(1)[0])
        if isinstance(self.draft, HeadLM) and self.pending:  # a head drafts from the target's features of
            self.target.extend(torch.tensor(self.pending, dtype=torch.long))  # the accepted tokens (untimed)
        s = self.shape
        self.prev = Prev(int(self._tokens(1)[0]), self.rng.integers(0, s.num_experts, s.num_moe_layers * s.top_k).astype(np.int16))
        self.manifest = self.selector.manifest(0, [1])

    def run_draft(self) -> None:
        tree = draft_tree(self.draft, self.pending, self.root, self.depth, self.topk, self.max_nodes, self.vocab)
        self.selector.select(self.manifest, 0, tree.tokens, tree.parents, tree.depths, tree.draft_logprob, self.prev)

    def after_draft(self) -> None:
        self.draft.keep(self.ctx)
        self.target.keep(self.ctx)
