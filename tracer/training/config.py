"""The default pair's architectures, its special tokens, and the targets the project sets for it.

Both models are 192 wide so that the trained target's embedding can seed the draft's. Every
target layer is MoE (32 routed experts, top-4) so that every layer's routing can be traced.
"""

from __future__ import annotations

from dataclasses import dataclass

SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>"]  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def _shared(vocab_size: int, seq_len: int) -> dict:
    """What target and draft share: vocabulary, width (so the target's embedding can seed the
    draft's), attention, norm, rope and the special ids."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=192,
        intermediate_size=768,  # the draft's MLP; unused by the target, whose every layer is MoE
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=max(512, seq_len),
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )


def target_config(vocab_size: int, seq_len: int, balance_coef: float = 0.02):
    """The tiny Qwen3-MoE target; `balance_coef` is saved as `router_aux_loss_coef`."""
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        **_shared(vocab_size, seq_len),
        num_hidden_layers=4,
        decoder_sparse_step=1,  # every layer is MoE (no mlp_only_layers)
        mlp_only_layers=[],
        moe_intermediate_size=64,
        num_experts=32,
        num_experts_per_tok=4,
        norm_topk_prob=True,
        output_router_logits=True,
        router_aux_loss_coef=balance_coef,
    )


def draft_config(vocab_size: int, seq_len: int, layers: int = 2):
    """The small dense Qwen3 draft, sharing the target's tokenizer and width."""
    from transformers import Qwen3Config

    return Qwen3Config(**_shared(vocab_size, seq_len), num_hidden_layers=layers)


@dataclass(frozen=True)
class PairTargets:
    """What the pair must achieve to serve as the embedded default; the card checks each one.

    The size is stated as "well under `size_said_mb`" and checked against `size_max_mb`; the
    agreement is a proxy for an accepted length + 1 of at least 2 under a 16-node tree.
    """

    size_said_mb: float = 50.0
    size_max_mb: float = 40.0
    wall_minutes: float = 30.0
    wall_threads: int = 2
    min_agreement: float = 0.60
    max_share: float = 4.0  # largest share of a layer's routed slots over its fair share
    max_dead: int = 0  # experts never chosen


TARGETS = PairTargets()
