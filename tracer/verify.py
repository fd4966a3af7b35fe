"""Verification: the whole candidate tree in one target forward, with its routing captured.

Every node is fed at RoPE position ``context + depth`` under a mask that shows it the context, the
root and its own ancestors, so its logits and routing equal those of running its root-to-node
path sequentially (tested per family in tests/tracer). Afterwards the cache keeps the context
plus the root: the root's key is the same as if it had been decoded alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from tracer.routing import RouterCapture
from tracer.runner import CachedLM
from tracer.tree import Tree


@dataclass
class Verified:
    """What the target says about each node of a tree."""

    target_next: np.ndarray  # int64 (n,): argmax after seq(node), or its sample at T > 0
    target_logprob: np.ndarray  # float32 (n,): log p(token | seq(parent)); NaN for the root
    experts: np.ndarray  # int16 (n, moe_layers, top_k), descending gate weight
    gates: np.ndarray  # float32 (n, moe_layers, top_k)
    logits: torch.Tensor | None = None  # (n, vocab) on the device, kept only when asked


@torch.inference_mode()
def verify_tree(target: CachedLM, capture: RouterCapture, tree: Tree, keep_logits: bool = False,
                next_tokens: Callable[[torch.Tensor, np.ndarray], np.ndarray] | None = None) -> Verified:
    """Run `tree` through the target after its cached context; leave context + root cached. `next_tokens(logits,
    depths)` picks each node's `target_next` (a sampler.Sampler's draw at T > 0); the argmax by default."""
    ctx = len(target)
    pos = torch.from_numpy(tree.depths) + ctx
    with capture.capture():
        logits = target.forward(torch.from_numpy(tree.tokens), pos, tree.ancestors(), ctx)
    experts, gates = capture.collect()
    dev = logits.device
    lsm = torch.log_softmax(logits.float(), dim=-1)
    parents = torch.from_numpy(tree.parents).clamp(min=0).to(dev)
    tlp = lsm[parents, torch.from_numpy(tree.tokens).to(dev)]
    tlp[0] = float("nan")
    nxt = logits.argmax(dim=-1)
    host = torch.stack([nxt.double(), tlp.double()]).cpu().numpy()
    target.keep(ctx + 1)
    chosen = host[0].astype(np.int64) if next_tokens is None else next_tokens(logits, tree.depths)
    return Verified(chosen, host[1].astype(np.float32), experts, gates, logits if keep_logits else None)
