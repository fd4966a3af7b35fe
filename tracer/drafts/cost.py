"""The manifest's `draft` object: what a draft kind reads per tree level, from its own tensors.

    {"name", "kind", "source", "params", "bytes", "shares_target", "shape": {...},
     "levels": {"nodes": [...], "forwards": [...], "bytes": [...]}}

* `params`: parameters the draft owns (tensors it shares with the target are not counted), except
  for `early-exit`, whose every parameter is the target's: there, the parameters of what it runs.
* `bytes`: bytes of every tensor one draft forward reads, the shared ones included (an MTP step
  reads the target's LM head again), each routed expert counted once (an upper bound for MoE
  drafts). The input embedding is a row lookup, not a read, and is counted only when tied to a
  head the draft reads. This is what ecosim charged per level before the `levels` object existed.
* `shape.dense_bytes`: `bytes` less the routed experts; `shape.moe`: null for a dense draft, else
  ``{"layers", "num_experts", "top_k", "expert_bytes"}`` (one routed expert, as stored).
* `levels`: tree level l (1..depth) runs `forwards[l]` draft forwards over `nodes[l]` tokens
  (the root alone at level 1, then the `topk` best frontier nodes: EAGLE-2's expansion in
  `tree.expand_tree`), reading `bytes[l]` = dense_bytes + moe layers x min(num_experts,
  nodes x top_k) x expert_bytes (every routed expert those tokens could wake; at most `bytes`).
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.shape import _tensors


def tensor_bytes(tensors: dict[int, torch.Tensor] | list[torch.Tensor]) -> int:
    vals = tensors.values() if isinstance(tensors, dict) else tensors
    return int(sum(t.numel() * t.element_size() for t in vals))


def describe(*, name: str, kind: str, source: str, params: int, read_bytes: int, shares: list[str],
             shape: dict[str, Any], moe: dict[str, int] | None = None) -> dict[str, Any]:
    """The `draft` object without `levels` (those need the tree; see `with_levels`)."""
    routed = 0 if moe is None else moe["layers"] * moe["num_experts"] * moe["expert_bytes"]
    return {
        "name": name, "kind": kind, "source": source, "params": int(params), "bytes": int(read_bytes),
        "shares_target": shares,
        "shape": {**shape, "dense_bytes": int(read_bytes - routed), "moe": moe},
    }


def with_levels(info: dict[str, Any], depth: int, topk: int) -> dict[str, Any]:
    """`info` plus its per-level cost for trees of this depth and topk."""
    nodes = [1] + [topk] * (depth - 1)
    dense, moe = info["shape"]["dense_bytes"], info["shape"]["moe"]
    per = [dense + (0 if moe is None else moe["layers"] * min(moe["num_experts"], n * moe["top_k"]) * moe["expert_bytes"])
           for n in nodes]
    return {**info, "levels": {"nodes": nodes, "forwards": [1] * depth, "bytes": per}}


def head_info(*, name: str, kind: str, source: str, module: torch.nn.Module, shares: list[str],
              shape: dict[str, Any], kv_bytes_per_token: int, extra: list[torch.Tensor] = (),
              moe: dict[str, int] | None = None) -> dict[str, Any]:
    """The object for a head draft: its own tensors, plus `extra` shared tensors it reads."""
    own = _tensors(module)
    shared = {id(t): t for t in extra if id(t) not in own}
    return describe(
        name=name, kind=kind, source=source, params=sum(p.numel() for p in module.parameters()),
        read_bytes=tensor_bytes(own) + tensor_bytes(shared), shares=shares,
        shape={**shape, "kv_bytes_per_token": int(kv_bytes_per_token)}, moe=moe,
    )
