"""Model types whose layers are not all alike (ecosim/catalog/hf_layers.py), as a spec.

Each family is built tiny with transformers' own classes, and the bytes the shape prices must be the bytes of the
parameters the model really has, counted module by module, less what the arithmetic leaves out by design (the
embedding, a row lookup; norms; the DeltaNet's A_log and dt_bias; Qwen's shared-expert gate; Gemma's router
scales), plus the recurrent state a step reads and writes. The state and the cache are also worked by hand.
"""

from __future__ import annotations

import pytest

from ecosim.catalog.hf_config import shape_from_config
from ecosim.errors import EcoSimError

LEFT_OUT = ("embed_tokens", "norm", "A_log", "dt_bias", "shared_expert_gate", "router.scale", "router.per_expert_scale")

QWEN_NEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, linear_key_head_dim=8, linear_value_head_dim=12,
                 linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=24,
                 shared_expert_intermediate_size=40, num_experts=8, num_experts_per_tok=2, dtype="bfloat16")
GEMMA4 = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
              attention_k_eq_v=True, enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=24,
              hidden_size_per_layer_input=0, dtype="bfloat16")
MINIMAX = dict(vocab_size=300, hidden_size=64, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2, dtype="bfloat16",
               bos_token_id=1, eos_token_id=2)


def _families():
    t = pytest.importorskip("transformers")
    return {
        "qwen3_next": (t.Qwen3NextConfig(**QWEN_NEXT), t.Qwen3NextForCausalLM),
        "qwen3_5_moe": (t.Qwen3_5MoeConfig(text_config={**QWEN_NEXT, "vocab_size": 300}),
                        t.Qwen3_5MoeForCausalLM),
        "gemma4": (t.Gemma4TextConfig(**GEMMA4), t.Gemma4ForCausalLM),
        "minimax_m2": (t.MiniMaxM2Config(**MINIMAX), t.MiniMaxM2ForCausalLM),
    }


@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5_moe", "gemma4", "minimax_m2"])
def test_the_shape_prices_the_parameters_the_model_has(family):
    torch = pytest.importorskip("torch")
    cfg, cls = _families()[family]
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    model = cls._from_config(text, dtype=torch.bfloat16)
    s = shape_from_config(cfg.to_dict(), family, "")
    priced = sum(p.numel() for n, p in model.named_parameters() if not any(x in n for x in LEFT_OUT))
    if getattr(text, "tie_word_embeddings", False):  # the LM head is the embedding, read once per step all the same
        priced += text.vocab_size * text.hidden_size
    state_bytes = 2 * 2 * _state_elems(text)  # BF16, read and written
    routed = s.num_moe_layers * s.num_experts * s.expert_bytes
    assert routed + s.dense_bytes == 2 * priced + state_bytes


def _state_elems(c) -> int:
    """Gated DeltaNet state by hand: per linear layer num_v_heads x dk x dv, plus the conv's kernel - 1 inputs."""
    types = getattr(c, "layer_types", None) or []
    n = sum(t == "linear_attention" for t in types)
    if not n:
        return 0
    conv = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
    return n * (c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim + conv * (c.linear_conv_kernel_dim - 1))


def test_hybrid_linear_attention_by_hand():
    """8 layers, every 4th full: layers 3 and 7 cache 2 kv heads x 16 x (k, v) = 64 elements each; the six linear
    layers hold 4 x 8 x 12 = 384 state elements plus a conv of 2*16 + 48 = 80 channels x 3 inputs = 240: 3,744."""
    pytest.importorskip("transformers")
    cfg, _ = _families()["qwen3_next"]
    s = shape_from_config(cfg.to_dict(), "q", "")
    assert s.kv_bytes_per_token == 2 * 64 * 2  # two full layers, BF16
    assert _state_elems(cfg) == 6 * (384 + 240) == 3744
    assert s.moe_layers == tuple(range(8)) and (s.num_experts, s.top_k, s.num_shared_experts) == (8, 2, 1)


def test_gemma4_full_layers_share_keys_and_values():
    """Sliding layers cache k and v at 2 heads x 16; the full layer (the 6th) keys at 1 head x 32 that double as
    values: 5 x 64 + 32 = 352 elements a token."""
    pytest.importorskip("transformers")
    cfg, _ = _families()["gemma4"]
    assert shape_from_config(cfg.to_dict(), "g", "").kv_bytes_per_token == 352 * 2


def test_a_dense_gemma4_and_a_bad_layer_list_are_refused():
    with pytest.raises(EcoSimError, match="enable_moe_block"):
        shape_from_config({"model_type": "gemma4_text", "num_hidden_layers": 2, "hidden_size": 8}, "g", "")
    bad = {"model_type": "qwen3_next", **{k: v for k, v in QWEN_NEXT.items() if k != "dtype"},
           "layer_types": ["linear_attention"] * 3}
    with pytest.raises(EcoSimError, match="layer_types") as e:
        shape_from_config(bad, "q", "")
    assert "\n" not in str(e.value)
