"""Tiny random MoE models of the five families, saved as ordinary local checkpoints.

    tracer tiny --family deepseek_v3 --out ds

writes ``ds/target`` (the MoE model) and ``ds/draft`` (a smaller model of the same
family), each a normal safetensors checkpoint with the same byte-level tokenizer, so that
``tracer record --model ds`` loads them through the same code path as a real checkpoint.
Each is built from its transformers config class with ``_from_config`` (random weights, seeded).
Random weights give meaningless acceptance: these models test the machinery, not the science.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracer.errors import TracerError

FAMILIES = ("qwen3_moe", "deepseek_v3", "gpt_oss", "mixtral", "olmoe")
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>"]  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
VOCAB = len(SPECIALS) + 256  # specials + one token per byte (no merges)


def build_tokenizer():
    """A byte-level tokenizer without merges: every byte is a token; encode() prepends <|bos|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", BOS_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIALS[BOS_ID], eos_token=SPECIALS[EOS_ID],
        pad_token=SPECIALS[PAD_ID], model_max_length=4096,
    )


def _common(layers: int, init: float) -> dict[str, Any]:
    return dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
        max_position_embeddings=1024, initializer_range=init, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
    )


def tiny_config(family: str, *, draft: bool = False, init: float = 0.1):
    """The config of a tiny model of `family` (the draft: fewer layers and experts)."""
    import transformers as tf

    layers = 1 if draft else 3
    c = _common(layers, init)
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(
            **c, intermediate_size=128, num_key_value_heads=2, head_dim=16, moe_intermediate_size=32,
            num_experts=8 if draft else 16, num_experts_per_tok=2 if draft else 4, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[],
        )
    if family == "deepseek_v3":
        # group-limited top-k that matters: 4 groups of 4, the best 2 groups, then top-4 of their 8
        return tf.DeepseekV3Config(
            **c, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=4,
            first_k_dense_replace=1, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4,
            n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
            q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        )
    if family == "gpt_oss":
        # alternating sliding (window 8) / full attention, as in the real model; eager attention
        return tf.GptOssConfig(
            **{**c, "num_hidden_layers": 2 if draft else 4}, intermediate_size=32, head_dim=16,
            num_key_value_heads=2, num_local_experts=8 if draft else 16, num_experts_per_tok=2 if draft else 4,
            sliding_window=8,
        )
    if family == "mixtral":
        # a sliding window too, to exercise the single-window mask (Mixtral-8x7B-v0.1 itself has none)
        return tf.MixtralConfig(
            **c, intermediate_size=32, num_key_value_heads=2, num_local_experts=8,
            num_experts_per_tok=2, sliding_window=12,
        )
    if family == "olmoe":
        return tf.OlmoeConfig(
            **c, intermediate_size=32, num_key_value_heads=4, num_experts=16 if draft else 64,
            num_experts_per_tok=2 if draft else 8, norm_topk_prob=False,
        )
    raise TracerError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def attn_for(family: str) -> str:
    """GPT-OSS supports eager attention only (its sinks); the others run with sdpa."""
    return "eager" if family == "gpt_oss" else "sdpa"


def build_model(family: str, *, draft: bool = False, seed: int = 0, init: float = 0.1):
    """A tiny random model of `family`, float32, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(family, draft=draft, init=init)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_for(family), dtype=torch.float32)
    if family == "deepseek_v3":
        # a non-zero correction bias, so that the captured routing must include it
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for layer in model.model.layers:
                if hasattr(layer.mlp, "gate"):
                    layer.mlp.gate.e_score_correction_bias.copy_(torch.rand(cfg.n_routed_experts, generator=g) * 0.2)
    return model.eval()


def write_tiny(family: str, out: str | Path, *, seed: int = 0) -> Path:
    """Build and save a tiny target and draft of `family` under `out` (target/, draft/)."""
    if family not in FAMILIES:
        raise TracerError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TracerError(f"{out}: exists and is not a directory")
    tok = build_tokenizer()
    for sub, draft in (("target", False), ("draft", True)):
        model = build_model(family, draft=draft, seed=seed + (1000 if draft else 0))
        d = out / sub
        d.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)
    return out


def _randomise(module, seed: int, std: float = 0.1) -> None:
    """Seeded N(0, std) weights for every matrix of `module`, ones for every norm, zero biases."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def build_mtp(config, seed: int = 0):
    """A random DeepSeek-V3 MTP module for `config` (layer N = num_hidden_layers) and its tensors
    under the checkpoint's names (per-expert, as DeepSeek-V3's safetensors store them)."""
    import torch

    from tracer.drafts.mtp import MTPModule

    n = int(config.num_hidden_layers)
    torch.manual_seed(seed)
    module = MTPModule(config, n).float().eval()
    _randomise(module, seed)
    if hasattr(module.block.mlp, "gate"):
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            module.block.mlp.gate.e_score_correction_bias.copy_(torch.rand(config.n_routed_experts, generator=g) * 0.2)
    prefix = f"model.layers.{n}."
    out = {}
    for k, v in module.state_dict().items():
        k = k.removeprefix("block.")
        if k == "mlp.experts.gate_up_proj":
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = v[e, :inter].clone()
                out[f"{prefix}mlp.experts.{e}.up_proj.weight"] = v[e, inter:].clone()
        elif k == "mlp.experts.down_proj":
            for e in range(v.shape[0]):
                out[f"{prefix}mlp.experts.{e}.down_proj.weight"] = v[e].clone()
        else:
            out[prefix + k] = v.clone()
    return module, out


def add_mtp_layer(target_dir: str | Path, seed: int = 0):
    """Append a random MTP layer's tensors to the DeepSeek-V3 checkpoint in `target_dir` (as
    DeepSeek-V3 ships it: ``model.layers.{N}.*`` beside the model, with copies of the embedding and
    LM head under ``embed_tokens`` and ``shared_head.head``); returns the module written."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig

    target_dir = Path(target_dir)
    config = AutoConfig.from_pretrained(target_dir)
    module, tensors = build_mtp(config, seed)
    f = target_dir / "model.safetensors"
    state = load_file(str(f))
    n = int(config.num_hidden_layers)
    tensors[f"model.layers.{n}.embed_tokens.weight"] = state["model.embed_tokens.weight"].clone()
    tensors[f"model.layers.{n}.shared_head.head.weight"] = state["lm_head.weight"].clone()
    save_file({**state, **tensors}, str(f), metadata={"format": "pt"})
    return module


def write_eagle3(target_dir: str | Path, out: str | Path, *, seed: int = 0, draft_vocab: int | None = None):
    """A random EAGLE-3 head for the target in `target_dir`, saved in `out` (config.json +
    model.safetensors under the public names); its draft vocabulary is every other target id
    from 0 (all of them when `draft_vocab` is the target's), to exercise d2t. Returns the head."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig

    from tracer.drafts.eagle3 import Eagle3Config, Eagle3Head

    c = AutoConfig.from_pretrained(target_dir)
    layers = int(c.num_hidden_layers)
    vocab = int(c.vocab_size)
    dv = draft_vocab or (vocab + 1) // 2
    cfg = Eagle3Config(
        hidden_size=int(c.hidden_size), target_hidden_size=int(c.hidden_size), intermediate_size=2 * int(c.hidden_size),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=vocab, draft_vocab_size=dv,
        layer_ids=[0, layers // 2, layers - 1], rms_norm_eps=float(c.rms_norm_eps),
    )
    head = Eagle3Head(cfg).eval()
    _randomise(head, seed)
    step = 2 if dv * 2 <= vocab else 1
    ids = torch.arange(dv) * step
    with torch.no_grad():
        head.d2t.copy_(ids - torch.arange(dv))
        head.t2d.zero_()
        head.t2d[ids] = True
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg.to_json(), indent=2) + "\n", encoding="utf-8")
    return head
