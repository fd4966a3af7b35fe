"""Loading the target and its draft together, with everything the recording loop needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ecosim.catalog.models import ModelShape
from tracer.drafts.registry import parse
from tracer.loading import Source, load_model, load_tokenizer, resolve
from tracer.routing import RouterCapture
from tracer.runner import CachedLM
from tracer.shape import model_shape


@dataclass
class Pair:
    """A loaded target (with router hooks) and draft, each behind its own KV cache."""

    source: Source
    target: CachedLM
    draft: Any  # a CachedLM, or a head draft with its interface (tracer.drafts.heads.HeadLM)
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
    """Load `model` and its draft (``default`` or any kind of `tracer.drafts.registry`)."""
    src = resolve(model)
    spec = src.default_draft if draft == "default" else draft
    kind, arg = parse(spec)
    if kind.precheck is not None:  # a draft read from the target's checkpoint: fail before loading it
        kind.precheck(src)
    target = load_model(src, dtype=dtype, device=device, attn=attn, trust_remote_code=trust_remote_code)
    tok = load_tokenizer(src, trust_remote_code=trust_remote_code)
    capture = RouterCapture(target)
    shape = model_shape(target, src.name, capture.moe_layers, capture.top_k, src.ref)
    tlm = CachedLM(target)
    dlm, info = kind.load(arg, tlm, source=src, tokenizer=tok, dtype=dtype, device=device,
                          trust_remote_code=trust_remote_code, spec=spec)
    return Pair(src, tlm, dlm, capture, tok, shape, info, eos_ids(target, tok))
