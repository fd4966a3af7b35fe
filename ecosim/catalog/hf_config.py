"""A model shape from a Hugging Face `config.json`, for MoE models the catalogue (models.py) does not list.

Plain JSON in, a `ModelShape` out: no torch, no transformers (ecosim stays torch-free). The bytes follow the
catalogue's arithmetic exactly (shape.Arch.shape): one routed expert is 3 * hidden * moe_intermediate
parameters (gate, up, down; gpt-oss's fused gate_up + down is the same count); the dense bytes are attention,
the dense MLP layers, the shared experts, the routers (at the config's dtype) and the LM head (at the config's
dtype); the embedding is a row lookup, not a read. Each model type's fields are read as transformers 5.24's
modeling code reads them (which layers are MoE, which size a dense layer or a shared expert has), with one
addition: DeepSeek's and GLM's moe_layer_freq, which transformers ignores and DeepSeek's own modeling code,
vLLM and SGLang apply (see _FIRST_K_DENSE).

Approximated, as the catalogue approximates them: norms, biases (Qwen2-MoE's qkv, gpt-oss's experts and
attention), gpt-oss's attention sinks, Qwen2-MoE's shared_expert_gate (hidden weights per MoE layer) and FP8
block scales are left out; every layer's KV cache counts the whole context (gpt-oss's sliding-window and
Llama-4's chunked layers cache less); multi-token-prediction layers (num_nextn_predict_layers) are not part of
the target's forward and are left out. DeepSeek-V2's group_limited_greedy ranks groups by their best expert,
the router generator (routing/generator.py) by the sum of their two best: the same limit, a slightly different
choice of groups. An FP8 config's shape leaves `act_quant` false, as the catalogue's deepseek-v3.1 does (the
fidelity rows set it per served dtype).
"""

from __future__ import annotations

from typing import Any

from ecosim.catalog.hf_layers import MIXED
from ecosim.catalog.shape import GROUP_LIMITED, Arch, ModelShape, gqa_params, group_limit_problem
from ecosim.errors import EcoSimError

SUPPORTED = ("deepseek_v2", "deepseek_v3", "gemma4", "gemma4_text", "glm4_moe", "gpt_oss", "granitemoe", "kimi_k2",
             "llama4", "llama4_text", "minimax_m2", "mixtral", "olmoe", "phimoe", "qwen2_moe", "qwen3_5_moe",
             "qwen3_5_moe_text", "qwen3_moe", "qwen3_next")
# Multimodal wrappers whose language model is their text_config, and the type that text model is read as.
_WRAPPED = {"llama4": "llama4_text", "qwen3_5_moe": "qwen3_5_moe", "gemma4": "gemma4"}
# Model types that are another type's architecture under their own name, read as that type: Kimi-K2 "reuses
# DeepSeekV3CausalLM" and names itself kimi_k2 only so engines can tell it apart; its deploy guidance says to set
# model_type to deepseek_v3 where an engine does not know it
# (https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/docs/deploy_guidance.md).
_SAME_AS = {"kimi_k2": "deepseek_v3", "qwen3_5_moe_text": "qwen3_5_moe", "gemma4_text": "gemma4"}
_MLA = ("deepseek_v2", "deepseek_v3")
# Types whose MoE layers are the ones from first_k_dense_replace on (and every moe_layer_freq-th, as DeepSeek's own
# modeling code and vLLM's / SGLang's DeepseekV2 decoder layer read it: layer_idx % moe_layer_freq == 0);
# their routed experts are moe_intermediate_size wide, their dense layers intermediate_size.
_FIRST_K_DENSE = ("deepseek_v2", "deepseek_v3", "glm4_moe")
_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}
# quantization_config.quant_method -> bytes per parameter of (routed experts, everything else but routers and the
# LM head; None: the config's dtype). fp8: DeepSeek-V3's block FP8 (e4m3, scales per 128 x 128 left out), as the
# catalogue's deepseek-v3.1; mxfp4: gpt-oss, experts only: 4 bits + one 8-bit scale per 32 = 4.25 bits.
_QUANT: dict[str, tuple[float, float | None]] = {"fp8": (1.0, 1.0), "mxfp4": (4.25 / 8, None)}


def _unsupported(model_type: object) -> EcoSimError:
    return EcoSimError(f"config.json model_type {model_type!r} is not a supported MoE model type (supported: "
                       f"{', '.join(SUPPORTED)})")


def _int(c: dict[str, Any], key: str, default: int | None = None, *alts: str) -> int:
    """c[key] (or the first of `alts` present) as a non-negative integer; `default` where absent or null (None:
    required)."""
    for k in (key, *alts):
        v = c.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise EcoSimError(f"config.json: {k} must be a non-negative integer, not {v!r}")
            return v
    if default is None:
        raise EcoSimError(f"config.json ({c.get('model_type')}): no {key}")
    return default


def _size(c: dict[str, Any], key: str, default: int | None = None, *alts: str) -> int:
    """A size (layers, widths, heads, vocabulary): as _int, and at least 1."""
    v = _int(c, key, default, *alts)
    if v < 1:
        raise EcoSimError(f"config.json: {key} must be at least 1, not {v}")
    return v


def _ints(c: dict[str, Any], key: str) -> list[int] | None:
    """c[key] as a list of non-negative integers (layer indices), None where absent or null."""
    v = c.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
        raise EcoSimError(f"config.json: {key} must be a list of layer indices, not {v!r}")
    return v


def _bytes_per_param(top: dict[str, Any], text: dict[str, Any]) -> tuple[float, float, float]:
    """(experts, dense, dtype) bytes per parameter: quantization_config's method where it has one, else the
    dtype (`dtype`, or `torch_dtype` before transformers 5; BF16 where neither says)."""
    dtype = text.get("dtype") or text.get("torch_dtype") or top.get("dtype") or top.get("torch_dtype") or "bfloat16"
    if not isinstance(dtype, str) or dtype not in _DTYPE_BYTES:
        raise EcoSimError(f"config.json: dtype {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}")
    plain = _DTYPE_BYTES[dtype]
    q = top.get("quantization_config") or text.get("quantization_config")
    if not q:
        return plain, plain, plain
    method = q.get("quant_method") if isinstance(q, dict) else None
    if method not in _QUANT:
        raise EcoSimError(f"config.json: quantization_config quant_method {method!r} is not supported "
                          f"({', '.join(_QUANT)}, or none)")
    experts, dense = _QUANT[method]
    return experts, plain if dense is None else dense, plain


def _moe_layers(family: str, c: dict[str, Any], layers: int) -> tuple[int, ...]:
    """Which decoder layers are MoE, as transformers' modeling code decides it per type."""
    if family in _FIRST_K_DENSE:
        first, every = _int(c, "first_k_dense_replace", 0), max(_int(c, "moe_layer_freq", 1), 1)
        ids = [i for i in range(layers) if i >= first and i % every == 0]
    elif family in ("qwen2_moe", "qwen3_moe", "qwen3_next"):  # (layer + 1) % decoder_sparse_step == 0, outside mlp_only_layers
        step, dense = max(_int(c, "decoder_sparse_step", 1), 1), set(_ints(c, "mlp_only_layers") or [])
        ids = [i for i in range(layers) if i not in dense and (i + 1) % step == 0]
    elif family == "llama4_text":  # moe_layers if given, else every interleave_moe_layer_step-th from step - 1
        step = max(_int(c, "interleave_moe_layer_step", 1), 1)
        given = _ints(c, "moe_layers")
        ids = sorted(set(given)) if given is not None else list(range(step - 1, layers, step))
    else:
        ids = list(range(layers))
    if not ids:
        raise EcoSimError(f"config.json ({family}): no MoE layer among its {layers} layers")
    if ids[0] < 0 or ids[-1] >= layers:
        raise EcoSimError(f"config.json ({family}): moe_layers must lie in [0, num_hidden_layers={layers})")
    return tuple(ids)


def _attention(family: str, c: dict[str, Any], hidden: int) -> tuple[int, int]:
    """(attention parameters of one layer, elements one token caches per layer).

    MLA (DeepSeek-V2/V3): q_a + q_b (or one q projection where q_lora_rank is null, as in V2-Lite) + kv_a + kv_b + o
    = hidden*q_lora + q_lora*heads*(nope+rope) + hidden*(kv_lora+rope) + kv_lora*heads*(nope+v) + heads*v*hidden;
    it caches the compressed latent and the shared rope key, kv_lora + rope. GQA: q, k, v, o (shape.gqa_params) and
    2 * kv_heads * head_dim cached, head_dim defaulting to hidden / heads as the modeling code does."""
    heads = _size(c, "num_attention_heads")
    if family in _MLA:
        q_lora, kv_lora = _int(c, "q_lora_rank", 0), _int(c, "kv_lora_rank")
        nope, rope, v = _int(c, "qk_nope_head_dim"), _int(c, "qk_rope_head_dim"), _int(c, "v_head_dim")
        q = hidden * heads * (nope + rope) if not q_lora else hidden * q_lora + q_lora * heads * (nope + rope)
        params = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * hidden
        return params, kv_lora + rope
    kv_heads = _size(c, "num_key_value_heads", heads)
    head_dim = _size(c, "head_dim", max(hidden // heads, 1))
    return gqa_params(hidden, heads, kv_heads, head_dim), 2 * kv_heads * head_dim


# n_group / topk_group where a config leaves them out: transformers 5.24's config defaults (DeepseekV3Config 8 / 4,
# Glm4MoeConfig 1 / 1, DeepseekV2Config none: no groups).
_DEFAULT_GROUPS = {"deepseek_v3": (8, 4), "glm4_moe": (1, 1), "deepseek_v2": (1, 1)}


def _group_limits(family: str, c: dict[str, Any], experts: int, top_k: int) -> tuple[int, int]:
    """(n_group, topk_group) of the config's router; (0, 0) where it does not limit groups: DeepSeek-V2 only
    with topk_method group_limited_greedy, DeepSeek-V3 and GLM-4.5 whenever n_group > 1 (topk_group < n_group).
    Checked by the one rule (shape.group_limit_problem)."""
    if family not in _FIRST_K_DENSE:
        return 0, 0
    if family == "deepseek_v2" and c.get("topk_method", "greedy") != "group_limited_greedy":
        return 0, 0
    n0, t0 = _DEFAULT_GROUPS[family]
    n = _int(c, "n_group", n0)
    t = _int(c, "topk_group", t0 if "n_group" not in c else n)
    if n <= 1 or t >= n:
        return 0, 0
    why = group_limit_problem(n, t, experts, top_k)
    if why:
        raise EcoSimError(f"config.json: {why}")
    return n, t


def shape_from_config(cfg: dict[str, Any], name: str, source: str) -> ModelShape:
    """The `ModelShape` of a Hugging Face MoE config (a parsed config.json), through the catalogue's Arch."""
    if not isinstance(cfg, dict):
        raise EcoSimError("config.json: not a JSON object")
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        raise _unsupported(model_type)
    text = cfg
    if model_type in _WRAPPED:  # a multimodal wrapper: the language model is its text_config
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise EcoSimError(f"config.json ({model_type}): no text_config object")
    family = _WRAPPED.get(model_type) or _SAME_AS.get(model_type, model_type)
    if family == "gemma4" and not text.get("enable_moe_block"):
        raise EcoSimError("config.json (gemma4): enable_moe_block is not set: a dense Gemma-4, not a MoE model")
    experts = _int(text, "n_routed_experts", 0, "num_local_experts", "num_experts")
    if experts == 0:
        raise EcoSimError(f"config.json ({family}): no routed experts (n_routed_experts, num_local_experts or "
                          f"num_experts): not a MoE model; supported MoE model types: {', '.join(SUPPORTED)}")
    top_k = _int(text, "num_experts_per_tok", None, "experts_per_token", "top_k_experts")
    if not 1 <= top_k <= experts:
        raise EcoSimError(f"config.json: num_experts_per_tok {top_k} must lie in [1, {experts}]")
    layers, hidden, vocab = _size(text, "num_hidden_layers"), _size(text, "hidden_size"), _size(text, "vocab_size")
    moe_layers = _moe_layers(family, text, layers)
    mixed = MIXED.get(family)
    attn, kv, state = mixed(text, hidden, layers) if mixed else (*_attention(family, text, hidden), 0)
    dense = len(moe_layers) < layers  # some layers have a dense MLP
    if family in _FIRST_K_DENSE or family in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "gemma4"):
        moe_inter = _size(text, "moe_intermediate_size")
        dense_inter = _int(text, "intermediate_size") if dense else 0
    else:  # Mixtral, PhiMoE, OLMoE, gpt-oss, Granite-MoE, Llama-4: intermediate_size is one expert's
        moe_inter = _size(text, "intermediate_size")
        dense_inter = _int(text, "intermediate_size_mlp") if dense else 0  # only Llama-4 has dense layers here
    shared, shared_inter = 0, None
    if family in _FIRST_K_DENSE:  # n_shared_experts of moe_intermediate_size each (one MLP of n times the width)
        shared = _int(text, "n_shared_experts", 0)
    elif family in ("qwen2_moe", "qwen3_next", "qwen3_5_moe"):  # one shared MLP of its own width
        shared_inter = _int(text, "shared_expert_intermediate_size", 0)
        shared = 1 if shared_inter else 0
    elif family == "llama4_text":  # one shared MLP as wide as an expert
        shared = 1
    elif family == "gemma4":  # every layer runs its dense MLP beside the experts: a shared expert of that width
        shared, shared_inter = 1, _size(text, "intermediate_size")
    expert_bpp, dense_bpp, plain = _bytes_per_param(cfg, text)
    n_group, topk_group = _group_limits(family, text, experts, top_k)
    own = None if (n_group, topk_group) == GROUP_LIMITED.get(family, (0, 0)) else (n_group, topk_group)
    arch = Arch(layers, moe_layers[0], experts, top_k, shared, hidden, moe_inter, dense_inter, vocab, attn, kv,
                 expert_bpp, dense_bpp, lm_head_bytes_per_param=plain, kv_bytes_per_elem=plain,
                 moe_layer_ids=moe_layers, shared_inter=shared_inter, router_bytes_per_param=plain,
                 attn_params_total=attn if mixed else None, kv_per_token_total=kv if mixed else None,
                 state_elems=state)
    return arch.shape(name, family, source, *(own or (None, None)))
