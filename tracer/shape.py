"""The target's `ModelShape`, measured from the loaded model's tensors (their dtypes as stored).

`expert_bytes` is one routed expert's weights (every tensor of a MoE layer's ``experts`` module
whose first dimension is the expert count, including quantisation scales), averaged over experts
and layers; `dense_bytes` is every other parameter and persistent buffer a forward reads: attention,
dense layers, shared experts, routers, norms and the LM head. The input embedding is a row lookup,
not a read, so it counts only when it is tied to the LM head (then the head reads it).
"""

from __future__ import annotations

from typing import Any

import torch

from ecosim.catalog.models import ModelShape
from tracer.routing import decoder_layers


def _tensors(module: torch.nn.Module) -> dict[int, torch.Tensor]:
    """Parameters and persistent buffers, deduplicated (tied weights count once)."""
    out: dict[int, torch.Tensor] = {}
    for _, p in module.named_parameters():
        out[id(p)] = p
    for name, mod in module.named_modules():
        for bname, b in mod.named_buffers(recurse=False):
            if b is not None and bname not in mod._non_persistent_buffers_set:
                out[id(b)] = b
    return out


def nbytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(module).values())


def nparams(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())


def num_experts(cfg: Any) -> int:
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            return v
    raise ValueError(f"{type(cfg).__name__}: no expert count in the config")


def routed_expert_bytes(model: Any, moe_layers: list[int], n_experts: int) -> int:
    """Bytes of all routed experts of all MoE layers."""
    layers = decoder_layers(model)
    total = 0
    for i in moe_layers:
        mlp = layers[i].mlp
        experts = getattr(mlp, "experts", None)
        if experts is None:
            raise ValueError(f"layer {i}: no `mlp.experts` module")
        for t in _tensors(experts).values():
            if isinstance(experts, torch.nn.ModuleList) or (t.dim() >= 1 and t.shape[0] == n_experts):
                total += t.numel() * t.element_size()
    return total


def kv_bytes_per_token(cfg: Any, dtype: torch.dtype) -> int:
    """KV-cache bytes one token adds over all layers (MLA caches its compressed latent)."""
    if getattr(cfg, "kv_lora_rank", None):
        per_layer = cfg.kv_lora_rank + cfg.qk_rope_head_dim
    else:
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        per_layer = 2 * (getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads) * head_dim
    return int(cfg.num_hidden_layers * per_layer * torch.tensor([], dtype=dtype).element_size())


def model_shape(model: Any, name: str, moe_layers: list[int], top_k: int, source: str) -> ModelShape:
    """The trace manifest's `model` object for a loaded target."""
    cfg = model.config
    n_exp = num_experts(cfg)
    routed = routed_expert_bytes(model, moe_layers, n_exp)
    expert_bytes = round(routed / (n_exp * len(moe_layers)))
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    embed_bytes = 0 if emb is head else emb.numel() * emb.element_size()
    dense_bytes = nbytes(model) - routed - embed_bytes
    moe_inter = int(getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size)
    return ModelShape(
        name=name,
        family=str(cfg.model_type),
        num_layers=int(cfg.num_hidden_layers),
        moe_layers=tuple(moe_layers),
        num_experts=n_exp,
        top_k=top_k,
        num_shared_experts=int(getattr(cfg, "n_shared_experts", 0) or 0),
        hidden_size=int(cfg.hidden_size),
        moe_intermediate_size=moe_inter,
        vocab_size=int(head.shape[0]),
        expert_bytes=int(expert_bytes),
        dense_bytes=int(dense_bytes),
        kv_bytes_per_token=kv_bytes_per_token(cfg, emb.dtype if emb.dtype.is_floating_point else torch.bfloat16),
        bytes_per_param=round(expert_bytes / (3 * int(cfg.hidden_size) * moe_inter), 4),
        source=f"measured from the loaded checkpoint {source}",
    )
