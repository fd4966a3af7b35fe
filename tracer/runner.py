"""A causal LM with its own KV cache, fed tokens at explicit positions under explicit masks.

Both the target and the draft run through `CachedLM`. The cache is a plain `DynamicCache()` (no
config), so sliding-window layers keep every key and the mask hides the old ones: that makes
cropping back after a tree forward always possible, which a sliding cache does not allow once full.
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.masks import Windows, attention_windows, build_masks


class CachedLM:
    """`model` plus a KV cache and the RoPE position of every cached key."""

    def __init__(self, model: Any, windows: Windows | None = None):
        self.model = model
        emb = model.get_input_embeddings().weight
        self.device = emb.device
        self.dtype = emb.dtype if emb.dtype.is_floating_point else torch.float32
        self.windows = attention_windows(model.config) if windows is None else windows
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.tap: Any = None  # a `drafts.heads.FeatureTap` when a head draft reads this model's features
        self.reset()

    def reset(self) -> None:
        """Empty the cache."""
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.key_pos = torch.zeros(0, dtype=torch.long, device=self.device)
        self.features: torch.Tensor | None = None  # (len, dim): the tap's feature of every cached key

    def __len__(self) -> int:
        return int(self.key_pos.shape[0])

    @torch.inference_mode()
    def forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        visible_tail: torch.Tensor,
        tail_start: int,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Append `ids` at RoPE positions `pos`; return their logits (q, vocab), or the last row's.

        Keys before `tail_start` are visible to every query; `visible_tail` (q, len + q - tail_start)
        says which of the others each query sees (itself included).
        """
        ids, pos = ids.to(self.device), pos.to(self.device)
        key_pos = torch.cat([self.key_pos, pos])
        mask = build_masks(self.windows, visible_tail.to(self.device), tail_start, pos, key_pos, self.dtype)
        out = self.model(
            input_ids=ids[None], position_ids=pos[None], attention_mask=mask, cache=self.cache,
            use_cache=True, logits_to_keep=1 if last_only else 0,
        )
        self.cache = out.cache
        self.key_pos = key_pos
        if self.tap is not None:
            new = self.tap.take()
            self.features = new if self.features is None else torch.cat([self.features, new])
        return out.logits[0]

    def extend(self, ids: torch.Tensor, last_only: bool = True) -> torch.Tensor:
        """Append a plain causal run of tokens after the cache (a prompt or a context)."""
        n, start = int(ids.shape[0]), len(self)
        pos = torch.arange(start, start + n, dtype=torch.long)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        return self.forward(ids, pos, causal, start, last_only=last_only)

    def keep(self, n: int) -> None:
        """Drop every cached key after the first `n`."""
        drop = len(self) - n
        if drop > 0:
            self.cache.crop(-drop)
            self.key_pos = self.key_pos[:n]
            if self.features is not None:
                self.features = self.features[:n]
