"""Loading the target and its draft together, with everything the recording loop needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ecosim.catalog.models import ModelShape
from tracer.errors import TracerError
from tracer.loading import (
    Source,
    early_exit_layers,
    early_exit_view,
    load_model,
    load_tokenizer,
    resolve,
    same_tokenizer,
)
from tracer.routing import RouterCapture
from tracer.runner import CachedLM
from tracer.shape import model_shape, nbytes, nparams


@dataclass
class Pair:
    """A loaded target (with router hooks) and draft, each behind its own KV cache."""

    source: Source
    target: CachedLM
    draft: CachedLM
    capture: RouterCapture
    tokenizer: Any
    shape: ModelShape
    draft_info: dict[str, Any]
    eos_ids: frozenset[int]


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a greedy generation, as `generate` sees them."""
    gen = getattr(model, "generation_config", None)
    for v in (getattr(gen, "eos_token_id", None), getattr(model.config, "eos_token_id", None), tokenizer.eos_token_id):
        if v is not None:
            return frozenset([v] if isinstance(v, int) else v)
    return frozenset()


def load_pair(model: str, draft: str = "default", *, dtype: str = "auto", device: str = "cpu",
              attn: str = "auto", trust_remote_code: bool = False) -> Pair:
    """Load `model` and its draft (``default``, ``early-exit:N``, a name, a directory or a hub id)."""
    src = resolve(model)
    target = load_model(src, dtype=dtype, device=device, attn=attn, trust_remote_code=trust_remote_code)
    tok = load_tokenizer(src, trust_remote_code=trust_remote_code)
    capture = RouterCapture(target)
    shape = model_shape(target, src.name, capture.moe_layers, capture.top_k, src.ref)
    spec = src.default_draft if draft == "default" else draft
    n = early_exit_layers(spec, int(target.config.num_hidden_layers))
    if n is not None:
        dmodel = early_exit_view(target, n)
        info = {"name": f"{src.name}:early-exit:{n}", "kind": "early-exit", "layers": n}
    else:
        dsrc = resolve(spec, what="--draft")
        dev = device if device != "auto" else str(target.get_input_embeddings().weight.device)
        dmodel = load_model(dsrc, dtype=dtype, device=dev, attn="auto", trust_remote_code=trust_remote_code)
        if not same_tokenizer(tok, load_tokenizer(dsrc, trust_remote_code=trust_remote_code)):
            raise TracerError(f"--draft {spec}: its tokenizer differs from the target's ({src.ref}); a draft must share it")
        info = {"name": dsrc.name, "kind": "model", "source": dsrc.ref}
    info.update(params=nparams(dmodel), bytes=nbytes(dmodel))
    return Pair(src, CachedLM(target), CachedLM(dmodel), capture, tok, shape, info, eos_ids(target, tok))
