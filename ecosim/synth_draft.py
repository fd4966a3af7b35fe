"""Which draft a synthetic trace imitates: its acceptance length and what it costs to run.

A draft is priced by the bytes it reads per tree level (the cost model's default draft time is
depth x draft bytes / bandwidth), so no synthetic trace drafts for free. Acceptance: the
generator's per-node `accept` is set by bisection so that the trees' mean accepted length (tokens
per step with the whole tree verified) equals a published acceptance length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError


@dataclass(frozen=True)
class DraftKind:
    name: str
    kind: str
    accept_len: float | None  # published mean accepted tokens per step, None: not published for this use
    depth: int | None  # tree shape the figure was measured with (None: keep the trace's)
    topk: int | None
    source: str


DRAFTS: dict[str, DraftKind] = {
    d.name: d
    for d in [
        # DeepSeek-V3 Technical Report (arXiv:2412.19437), section 5.4.3: with one MTP module the second
        # token is accepted 85-90% of the time (1.8x tokens per second); 1.875 is the midpoint, one chain.
        DraftKind("mtp", "mtp", 1.875, 1, 1, "DeepSeek-V3 Technical Report (arXiv:2412.19437) s5.4.3: second-token "
                  "acceptance 85-90% with one MTP module (1.875 = midpoint, depth 1)"),
        # An EAGLE-style head: one decoder layer plus the target's LM head; no published acceptance
        # length is asserted here: give --accept-len with its source.
        DraftKind("eagle3", "eagle3", None, None, None, "one decoder layer + the target's LM head (bytes derived from "
                  "the target's shape); acceptance not published here: use --accept-len"),
        # A separate small dense model of the target's family (vLLM / SGLang / llama.cpp `-md`): its own config.json
        # (`synth --draft-model`) gives its bytes and layers; each tree level is one forward of it.
        DraftKind("model", "model", None, None, None, "a separate dense draft model: bytes and layers from its "
                  "config.json (--draft-model)"),
    ]
}


def get_draft(name: str) -> DraftKind:
    if name not in DRAFTS:
        raise EcoSimError(f"unknown draft {name!r}; known: {', '.join(DRAFTS)}")
    return DRAFTS[name]


def default_draft(model: ModelShape) -> str:
    """MTP for DeepSeek-V3 (it ships an MTP module), an EAGLE-style head otherwise."""
    return "mtp" if model.family == "deepseek_v3" else "eagle3"


def draft_bytes(model: ModelShape) -> int:
    """Bytes one draft level reads: one layer of the target (its share of the dense bytes less the
    LM head, plus top-k routed experts for an MoE layer as in MTP) and the target's LM head.

    lm_head = vocab x hidden x 2 (BF16, as catalog/models.py counts it);
    per_layer_dense = (dense_bytes - lm_head) / num_layers.
    """
    lm_head = model.vocab_size * model.hidden_size * 2
    per_layer = max(model.dense_bytes - lm_head, 0) / model.num_layers
    return int(round(per_layer + model.top_k * model.expert_bytes + lm_head))


def draft_manifest(model: ModelShape, name: str, accept_len: float | None, accept: float,
                   dense: dict[str, Any] | None = None, decay: float = 1.0) -> dict[str, Any]:
    d = get_draft(name)
    if d.kind == "model" and dense is None:
        raise EcoSimError("a separate draft model needs its config.json: --draft-model PATH")
    b = dense["bytes"] if dense else draft_bytes(model)
    out = {
        "name": d.name, "kind": d.kind, "params": dense["params"] if dense else int(round(b / model.bytes_per_param)),
        "bytes": b, "accept_len": accept_len, "accept": round(accept, 4),
        "source": d.source if accept_len is not None else f"{d.kind} bytes; acceptance: accept={accept:.3g} as given, not a published figure",
        "bytes_source": "one target layer (dense share + top-k experts) + the target's full LM head, from the catalogue "
                        "shape (a draft with its own smaller vocabulary reads less: not modelled)",
    }
    if decay != 1.0:  # acceptance falling with depth: level d's is accept * decay^(d - 1)
        out["accept_decay"] = round(decay, 4)
    if dense:
        out.update(layers=dense["layers"], bytes_source=f"the draft model's own config.json ({dense['config']}): "
                   f"{dense['layers']} dense layers and its LM head, {dense['params'] / 1e9:.3g}B parameters")
    return out


def dense_draft(path: str) -> dict[str, Any]:
    """A separate dense draft model (a small model of the target's family, e.g. Qwen3-0.6B for Qwen3 targets), from
    its Hugging Face config.json (or the folder holding it): what one draft forward reads and how many decoder
    layers it runs. Bytes per forward = (layers x (attention + 3 x hidden x intermediate) + the LM head, read even
    where tied to the embedding) x bytes per parameter (its dtype); norms are left out, as for targets."""
    import json
    from pathlib import Path

    from ecosim.catalog.hf_config import _bytes_per_param, _int, _size
    from ecosim.catalog.shape import gqa_params

    p = Path(path)
    p = p / "config.json" if p.is_dir() else p
    try:
        cfg = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EcoSimError(f"{p}: not a readable config.json ({e})") from None
    if not isinstance(cfg, dict):
        raise EcoSimError(f"{p}: not a JSON object")
    try:
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        if _int(text, "num_local_experts", 0, "num_experts", "n_routed_experts"):
            raise EcoSimError("a MoE config: a separate draft here is a dense model")
        layers, hidden, vocab = _size(text, "num_hidden_layers"), _size(text, "hidden_size"), _size(text, "vocab_size")
        heads = _size(text, "num_attention_heads")
        kv = _size(text, "num_key_value_heads", heads)
        head_dim = _size(text, "head_dim", max(hidden // heads, 1))
        inter = _size(text, "intermediate_size")
        _, dense_bpp, plain = _bytes_per_param(cfg, text)
    except EcoSimError as e:
        raise EcoSimError(f"{p}: {str(e).removeprefix('config.json: ')}") from None
    params = layers * (gqa_params(hidden, heads, kv, head_dim) + 3 * hidden * inter) + vocab * hidden
    return {"params": params, "bytes": int(round((params - vocab * hidden) * dense_bpp + vocab * hidden * plain)),
            "layers": layers, "config": str(p.resolve())}
