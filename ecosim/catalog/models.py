"""Shapes of the MoE target models the simulator knows, with the bytes a forward reads.

Numbers come from each model's `config.json` on its Hugging Face model page (checked December 2026)
and are restated in ../shared/NOTES.md; the arithmetic that turns them into bytes is shape.py's. Any other MoE
model is read from its own config.json (hf_config.py), through `get_model`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ecosim.catalog.hf_config import shape_from_config
from ecosim.catalog.shape import Arch, ModelShape, gqa_params
from ecosim.errors import EcoSimError

__all__ = ["MODELS", "ModelShape", "get_model", "in_catalogue", "shape_of"]


# DeepSeek-V3 / V3.1 multi-head latent attention (config: q_lora_rank 1536, kv_lora_rank 512,
# qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, 128 heads): q_a + q_b + kv_a + kv_b + o.
_MLA = 7168 * 1536 + 1536 * 128 * (128 + 64) + 7168 * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * 7168

MODELS: dict[str, ModelShape] = {
    s.name: s
    for s in [
        # deepseek-ai/DeepSeek-V3.1 config.json: 61 layers, first_k_dense_replace 3, n_routed_experts
        # 256, n_shared_experts 1, num_experts_per_tok 8, hidden 7168, moe_intermediate 2048,
        # intermediate 18432, vocab 129280; FP8 e4m3 weights (block scales ignored, <0.01%).
        # One routed expert: 3*7168*2048 B = 44.04 MB. MLA caches 512+64 elements per token per layer.
        Arch(61, 3, 256, 8, 1, 7168, 2048, 18432, 129280, _MLA, 576, 1.0, 1.0).shape(
            "deepseek-v3.1", "deepseek_v3", "deepseek-ai/DeepSeek-V3.1 config.json"
        ),
        # Qwen/Qwen3-235B-A22B config.json: 94 layers all MoE, 128 experts, top-8, hidden 4096,
        # moe_intermediate 1536, 64 q heads / 4 kv heads of 128, vocab 151936, BF16: 37.75 MB/expert.
        Arch(94, 0, 128, 8, 0, 4096, 1536, 0, 151936, gqa_params(4096, 64, 4, 128), 2 * 4 * 128, 2.0, 2.0).shape(
            "qwen3-235b-a22b", "qwen3_moe", "Qwen/Qwen3-235B-A22B config.json"
        ),
        # Qwen/Qwen3-30B-A3B config.json: 48 layers, 128 experts, top-8, hidden 2048, moe_intermediate
        # 768, 32 q heads / 4 kv heads of 128, vocab 151936, BF16: 9.44 MB/expert.
        Arch(48, 0, 128, 8, 0, 2048, 768, 0, 151936, gqa_params(2048, 32, 4, 128), 2 * 4 * 128, 2.0, 2.0).shape(
            "qwen3-30b-a3b", "qwen3_moe", "Qwen/Qwen3-30B-A3B config.json"
        ),
        # openai/gpt-oss-120b config.json: 36 layers, 128 experts, top-4, hidden 2880, intermediate
        # 2880 (fused gate_up 2880x5760 + down 2880x2880), 64 q heads / 8 kv heads of 64, vocab 201088.
        # Experts MXFP4: 4 bits + one 8-bit scale per 32 = 4.25 bits per weight: 13.2 MB/expert.
        Arch(36, 0, 128, 4, 0, 2880, 2880, 0, 201088, gqa_params(2880, 64, 8, 64), 2 * 8 * 64, 4.25 / 8, 2.0).shape(
            "gpt-oss-120b", "gpt_oss", "openai/gpt-oss-120b config.json"
        ),
        # openai/gpt-oss-20b config.json: 24 layers, 32 experts, top-4, otherwise as gpt-oss-120b.
        Arch(24, 0, 32, 4, 0, 2880, 2880, 0, 201088, gqa_params(2880, 64, 8, 64), 2 * 8 * 64, 4.25 / 8, 2.0).shape(
            "gpt-oss-20b", "gpt_oss", "openai/gpt-oss-20b config.json"
        ),
        # mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, 8 experts, top-2, hidden 4096,
        # intermediate 14336, 32 q heads / 8 kv heads of 128, vocab 32000, BF16: 352.3 MB/expert.
        Arch(32, 0, 8, 2, 0, 4096, 14336, 0, 32000, gqa_params(4096, 32, 8, 128), 2 * 8 * 128, 2.0, 2.0).shape(
            "mixtral-8x7b", "mixtral", "mistralai/Mixtral-8x7B-v0.1 config.json"
        ),
        # allenai/OLMoE-1B-7B-0924 config.json: 16 layers, 64 experts, top-8, hidden 2048,
        # intermediate 1024, 16 heads of 128 (no GQA), vocab 50304, BF16: 12.58 MB/expert.
        Arch(16, 0, 64, 8, 0, 2048, 1024, 0, 50304, gqa_params(2048, 16, 16, 128), 2 * 16 * 128, 2.0, 2.0).shape(
            "olmoe-1b-7b", "olmoe", "allenai/OLMoE-1B-7B-0924 config.json"
        ),
    ]
}

_ALIASES = {"deepseek-v3": "deepseek-v3.1", "qwen3-235b": "qwen3-235b-a22b", "qwen3-30b": "qwen3-30b-a3b"}


def in_catalogue(name: str) -> bool:
    """Whether `name` is a catalogue shape or alias (not a config path)."""
    return _ALIASES.get(name.lower(), name.lower()) in MODELS


def get_model(name: str) -> ModelShape:
    """A catalogue shape by name or alias, or the shape of a Hugging Face MoE `config.json` given as its path or
    the directory holding it (hf_config.py): named after the directory (the file's stem if not config.json)."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key in MODELS:
        return MODELS[key]
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    elif path.suffix != ".json" and "/" not in name:  # neither a catalogue name nor a path
        raise EcoSimError(f"unknown model shape {name!r}; known: {', '.join(sorted(MODELS))}, or a Hugging Face "
                          f"config.json (or its directory)")
    if not path.is_file():
        raise EcoSimError(f"{path}: no such file (a model is a catalogue name, a Hugging Face config.json or its "
                          f"directory)")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EcoSimError(f"{path}: not a readable config.json ({e})") from None
    label = path.parent.resolve().name if path.name == "config.json" else path.stem
    try:
        return shape_from_config(cfg, label, str(path))
    except EcoSimError as e:  # say which file
        raise EcoSimError(f"{path}: {str(e).removeprefix('config.json: ')}") from None


def shape_of(model: str | ModelShape) -> ModelShape:
    """A shape given by catalogue name or as itself (the API and the presets take either)."""
    return get_model(model) if isinstance(model, str) else model
