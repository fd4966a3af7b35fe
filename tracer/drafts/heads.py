"""Drafts that read the target's hidden states (MTP, EAGLE-3): a feature tap and a cached head.

A head drafts token ``x_{p+1}`` at position ``p`` from two inputs: a *feature* of position ``p-1``
and the embedding of the token ``x_p`` (EAGLE, Li et al. 2024, eq. 1; DeepSeek-V3 MTP, section
2.2: ``h'_i = M [RMSNorm(h_i); RMSNorm(Emb(t_{i+1}))]``). Over the committed context the feature is
the target's own (read by `FeatureTap` from the target's forwards and kept beside the target's KV
cache); below the root of a candidate tree it is the head's own output for the node's parent, so
one head forward per tree level chains the steps, as SGLang runs EAGLE and NextN drafts.

`HeadLM` offers the interface of `tracer.runner.CachedLM` (reset, extend, forward, keep, len), so
`tree.expand_tree` and the recording loop drive a head exactly like a separate draft model. Which
feature a query gets is read from its mask: the visible key one position before it is its parent;
if that key is in the context (before `tail_start`) the target's feature is used, else the head's
output stored for that key. Position 0 has no feature before it: a zero vector stands in.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tracer.masks import additive_mask
from tracer.runner import CachedLM


class FeatureTap:
    """Forward hooks on target modules; `take()` returns the features of the target's last forward.

    `select` names the modules whose outputs make the feature (concatenated along the last dim, in
    order): decoder-layer outputs for EAGLE-3, the final norm's output for MTP.
    """

    def __init__(self, modules: list[torch.nn.Module]):
        self._out: list[torch.Tensor | None] = [None] * len(modules)
        self._handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(modules)]

    def _hook(self, i: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            out = output[0] if isinstance(output, tuple) else output
            self._out[i] = out.detach()

        return hook

    def take(self) -> torch.Tensor:
        """(q, feature_dim) for the q tokens of the last forward (batch 1)."""
        if any(o is None for o in self._out):
            raise RuntimeError("feature tap: a tapped module did not run in the target's forward")
        feats = torch.cat([o[0] for o in self._out], dim=-1)  # type: ignore[index]
        self._out = [None] * len(self._out)
        return feats

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def attach_tap(target: CachedLM, modules: list[torch.nn.Module]) -> FeatureTap:
    """Tap `modules` of the target and keep their outputs beside its KV cache (`target.features`)."""
    tap = FeatureTap(modules)
    target.tap = tap
    target.reset()
    return tap


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, computed in float32."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class HeadLM:
    """A draft head behind a KV cache, fed the target's features; the interface of `CachedLM`.

    Subclasses implement `_run` (one forward of the head over q new queries) and the cache hooks
    `_clear` / `_crop`.
    """

    def __init__(self, target: CachedLM, embed: torch.nn.Module, feature_dim: int, out_dim: int, vocab_size: int):
        self.target, self.embed = target, embed
        self.device, self.dtype = target.device, target.dtype
        self.feature_dim, self.out_dim = feature_dim, out_dim
        self.vocab_size = vocab_size  # the target's: logits come back over the target's ids
        self.reset()

    # -- the cache -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.key_pos = torch.zeros(0, dtype=torch.long, device=self.device)
        self.out_hidden = torch.zeros(0, self.out_dim, dtype=self.dtype, device=self.device)
        self._clear()

    def __len__(self) -> int:
        return int(self.key_pos.shape[0])

    def keep(self, n: int) -> None:
        if len(self) > n:
            self.key_pos, self.out_hidden = self.key_pos[:n], self.out_hidden[:n]
            self._crop(n)

    # -- forwards --------------------------------------------------------------------------------
    def _target_feature(self, pos: int) -> torch.Tensor:
        if pos < 0:
            return torch.zeros(self.feature_dim, dtype=self.dtype, device=self.device)
        feats = self.target.features
        if feats is None or pos >= feats.shape[0]:
            raise RuntimeError(f"head draft: no target feature for position {pos} (the target has {0 if feats is None else feats.shape[0]})")
        return feats[pos]

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, pos: torch.Tensor, visible_tail: torch.Tensor, tail_start: int,
                last_only: bool = False) -> torch.Tensor:
        """Append `ids` at `pos` (mask as in `CachedLM.forward`); return logits over the target's vocab."""
        ids, pos, visible_tail = ids.to(self.device), pos.to(self.device), visible_tail.to(self.device)
        start = len(self)
        key_pos = torch.cat([self.key_pos, pos])
        feats: list[torch.Tensor] = []  # per query: a target feature (feature_dim) or a head output (out_dim)
        own = torch.zeros(len(ids), dtype=torch.bool)
        for r in range(len(ids)):
            p = int(pos[r])
            tail = visible_tail[r].nonzero().flatten() + tail_start
            parent = [int(k) for k in tail.tolist() if k != start + r and int(key_pos[k]) == p - 1]
            if parent and tail_start <= parent[0] < start:  # a tree node of an earlier level
                feats.append(self.out_hidden[parent[0]])
                own[r] = True
            else:  # the parent is in the context (or in this same causal run): the target's feature
                feats.append(self._target_feature(p - 1))
        mask = additive_mask(visible_tail, tail_start, pos, key_pos, None, self.dtype)
        logits, out = self._run(ids, feats, own, pos, mask)
        self.key_pos = key_pos
        self.out_hidden = torch.cat([self.out_hidden, out])
        return logits[-1:] if last_only else logits

    def extend(self, ids: torch.Tensor, last_only: bool = True) -> torch.Tensor:
        """A plain causal run after the cache (a prompt or a context), on the target's features."""
        n, start = int(ids.shape[0]), len(self)
        pos = torch.arange(start, start + n, dtype=torch.long)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        return self.forward(ids, pos, causal, start, last_only=last_only)

    # -- what a kind implements ------------------------------------------------------------------
    def _run(self, ids: torch.Tensor, feats: list[torch.Tensor], own: torch.Tensor, pos: torch.Tensor,
             mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits over the target's vocab (q, V), the head's output feature (q, out_dim))."""
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    def _crop(self, n: int) -> None:
        raise NotImplementedError
