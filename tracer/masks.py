"""Additive attention masks for feeding tokens at explicit positions over a KV cache.

Every forward the tracer runs passes its own 4D float mask, shape (1, 1, q, kv): 0 where a query may
attend, ``finfo(dtype).min`` elsewhere (a *bool* mask is silently wrong under eager attention: it is
added as 0/1). transformers returns a prepared 4D mask unchanged, so the same code serves a prompt
(causal), a draft step and a whole candidate tree (each node sees the context, the root and its own
ancestors). Sliding-window layers additionally hide keys ``window`` or more positions behind the
query, exactly as ``masking_utils.sliding_window_overlay`` does (``kv > q - window``); models with
both kinds of layers (GPT-OSS) get a dict ``{"full_attention": m, "sliding_attention": m_sw}``.
"""

from __future__ import annotations

from typing import Any

import torch

Windows = int | None | dict[str, int | None]


def attention_windows(config: Any) -> Windows:
    """How the model masks attention: None (full), an int (one window), or a window per layer type."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types:
        if "sliding_attention" not in types:
            return None
        return {t: (window if t == "sliding_attention" else None) for t in sorted(set(types))}
    if getattr(config, "use_sliding_window", True) is False:
        return None  # Qwen-style configs keep a window value they do not use
    return window


def additive_mask(
    visible_tail: torch.Tensor,
    tail_start: int,
    q_pos: torch.Tensor,
    key_pos: torch.Tensor,
    window: int | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """(1, 1, q, kv) float mask: keys before `tail_start` are visible, the rest as `visible_tail` says.

    `visible_tail` is (q, kv - tail_start) bool; `q_pos` (q,) and `key_pos` (kv,) are the RoPE
    positions of the queries and of every key (cache then new tokens), used for sliding windows.
    """
    q, kv = visible_tail.shape[0], key_pos.shape[0]
    allowed = torch.ones(q, kv, dtype=torch.bool, device=visible_tail.device)
    allowed[:, tail_start:] = visible_tail
    if window is not None:
        allowed &= (q_pos[:, None] - key_pos[None, :]) < window
    mask = torch.zeros(q, kv, dtype=dtype, device=visible_tail.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def build_masks(
    windows: Windows,
    visible_tail: torch.Tensor,
    tail_start: int,
    q_pos: torch.Tensor,
    key_pos: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The `attention_mask` argument for a model with these `windows`."""
    if isinstance(windows, dict):
        return {t: additive_mask(visible_tail, tail_start, q_pos, key_pos, w, dtype) for t, w in windows.items()}
    return additive_mask(visible_tail, tail_start, q_pos, key_pos, windows, dtype)
