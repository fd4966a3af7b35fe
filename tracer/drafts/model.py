"""`model:PATH`: a separate, smaller checkpoint that shares the target's tokenizer (SpecInfer, Medusa's
baseline, vanilla speculative decoding). PATH is a local directory, a registry name or a hub id."""

from __future__ import annotations

from typing import Any

import torch

from tracer.drafts.cost import describe
from tracer.errors import TracerError
from tracer.loading import load_model, load_tokenizer, resolve, same_tokenizer
from tracer.routing import decoder_layers, find_routers
from tracer.runner import CachedLM
from tracer.shape import nbytes, nparams, num_experts, routed_expert_bytes


def moe_of(model: Any, layers: list[int] | None = None) -> dict[str, int] | None:
    """The routed experts a forward of `model` may read (its first `layers` only, when given)."""
    routers = [(i, r) for i, r in find_routers(model) if layers is None or i in layers]
    if not routers:
        return None
    n = num_experts(model.config)
    ids = [i for i, _ in routers]
    return {"layers": len(ids), "num_experts": n, "top_k": int(routers[0][1].top_k),
            "expert_bytes": round(routed_expert_bytes(model, ids, n) / (n * len(ids)))}


def load(arg: str, target: CachedLM, *, tokenizer: Any, dtype: str, device: str, trust_remote_code: bool,
         spec: str, **_: Any) -> tuple[CachedLM, dict[str, Any]]:
    dsrc = resolve(arg, what="--draft")
    dev = device if device != "auto" else str(target.device)
    dmodel = load_model(dsrc, dtype=dtype, device=dev, attn="auto", trust_remote_code=trust_remote_code)
    if not same_tokenizer(tokenizer, load_tokenizer(dsrc, trust_remote_code=trust_remote_code)):
        raise TracerError(f"--draft {spec}: its tokenizer differs from the target's; a draft must share it")
    cfg = dmodel.config
    info = describe(
        name=dsrc.name, kind="model", source=dsrc.ref, params=nparams(dmodel), read_bytes=nbytes(dmodel),
        shares=[], moe=moe_of(dmodel),
        shape={"layers": len(decoder_layers(dmodel)), "hidden_size": int(cfg.hidden_size),
               "family": str(cfg.model_type), "input": "tokens",
               "kv_bytes_per_token": kv_bytes(dmodel, len(decoder_layers(dmodel)))},
    )
    return CachedLM(dmodel), info


def kv_bytes(model: Any, layers: int) -> int:
    """KV-cache bytes one token adds over the first `layers` layers."""
    from tracer.shape import kv_bytes_per_token

    emb = model.get_input_embeddings().weight
    full = kv_bytes_per_token(model.config, emb.dtype if emb.dtype.is_floating_point else torch.bfloat16)
    return full * layers // int(model.config.num_hidden_layers)
