"""Phase 2: targets with the per-layer sizes of catalogue models, few layers, random weights.

A full target takes from the catalogue shape (ecosim/catalog/models.py) its hidden size, expert
width, expert count and top-k, and from the model's config.json its attention (heads, KV heads,
head size, sliding window), so one layer reads and computes what a layer of the real model does;
it has `layers` decoder layers (the real model has 24-94) and random weights, and is built through
the transformers class the tracer loads (`Qwen3MoeForCausalLM`, `GptOssForCausalLM`), saved as an
ordinary checkpoint so every later phase loads it as a real one. Its vocabulary is the tracer's
byte-level one (259 tokens): the embedding and LM head are not per-layer sizes, and at real
vocabularies (152k, 201k) they would outweigh two layers. Experts are stored in the check's dtype
(bfloat16 on a GPU), not gpt-oss's MXFP4, so a gpt-oss expert reads 49.8 MB instead of 13.2 MB.

The draft is the tracer's tiny model of the same family (tracer/tiny.py: one or two layers,
hidden 64, the same tokenizer). Under `--small` the targets are the tracer's tiny models too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecosim.catalog.models import get_model, in_catalogue
from ecosim.errors import EcoSimError

# Attention of the catalogue models, from their config.json (the catalogue's shape keeps only the
# bytes and FLOPs it implies): query heads, KV heads, head size, sliding window (gpt-oss alternates
# 128-token sliding layers with full ones).
ATTENTION: dict[str, dict[str, Any]] = {
    "qwen3-30b-a3b": dict(num_attention_heads=32, num_key_value_heads=4, head_dim=128),
    "qwen3-235b-a22b": dict(num_attention_heads=64, num_key_value_heads=4, head_dim=128),
    "gpt-oss-20b": dict(num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128),
    "gpt-oss-120b": dict(num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128),
}
FAMILIES = ("qwen3_moe", "gpt_oss")  # the families a full target can be built in


def check_target(name: str) -> None:
    """One line when `name` is not a catalogue model the check can build."""
    if not in_catalogue(name) or get_model(name).name not in ATTENTION:
        raise EcoSimError(f"--targets {name}: the check builds {', '.join(ATTENTION)}")


def family_of(name: str) -> str:
    return get_model(name).family


def weight_bytes(name: str, layers: int, bytes_per_param: float) -> float:
    """Weights of a full target of `name` with `layers` layers (routed experts and attention; the rest is small)."""
    s = get_model(name)
    a = ATTENTION[s.name]
    attn = s.hidden_size * a["head_dim"] * (2 * a["num_attention_heads"] + 2 * a["num_key_value_heads"])
    return layers * (s.num_experts * s.expert_params + attn) * bytes_per_param


def full_config(name: str, layers: int, seed: int = 0):
    """The transformers config of a full target: the catalogue model's per-layer sizes, `layers` layers."""
    import transformers as tf

    from tracer.tiny import BOS_ID, EOS_ID, PAD_ID, VOCAB

    s = get_model(name)
    common = dict(vocab_size=VOCAB, hidden_size=s.hidden_size, num_hidden_layers=layers, max_position_embeddings=4096,
                  tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
                  pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, **ATTENTION[s.name])
    if s.family == "qwen3_moe":
        return tf.Qwen3MoeConfig(**common, moe_intermediate_size=s.moe_intermediate_size, num_experts=s.num_experts,
                                 num_experts_per_tok=s.top_k, intermediate_size=3 * s.moe_intermediate_size,
                                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    if s.family == "gpt_oss":
        return tf.GptOssConfig(**common, intermediate_size=s.moe_intermediate_size, num_local_experts=s.num_experts,
                               num_experts_per_tok=s.top_k)
    raise EcoSimError(f"{name}: family {s.family} is not one the check builds ({', '.join(FAMILIES)})")


def build_full(name: str, out: Path, layers: int, dtype: str, device: str, seed: int = 0) -> Path:
    """Write a full target of `name` (target/) and the tiny draft of its family (draft/) under `out`."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from tracer.tiny import attn_for, build_model, build_tokenizer

    hf_logging.disable_progress_bar()
    family = family_of(name)
    cfg = full_config(name, layers, seed)
    torch.manual_seed(seed)
    with torch.device(device):  # random weights made where they will run (seconds on a GPU)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_for(family), dtype=getattr(torch, dtype))
    tok = build_tokenizer()
    (out / "target").mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(out / "target", safe_serialization=True)
    tok.save_pretrained(out / "target")
    del model
    draft = build_model(family, draft=True, seed=seed + 1000)
    (out / "draft").mkdir(parents=True, exist_ok=True)
    draft.save_pretrained(out / "draft", safe_serialization=True)
    tok.save_pretrained(out / "draft")
    return out


def build_small(name: str, out: Path, seed: int = 0) -> Path:
    """The tracer's tiny pair of `name`'s family (tracer/tiny.py) under `out`."""
    from tracer.tiny import write_tiny

    return write_tiny(family_of(name), out, seed=seed)
