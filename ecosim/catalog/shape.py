"""What the cost model and the router need of a MoE target (`ModelShape`), and the arithmetic that derives its
bytes from an architecture (`Arch`), shared by the catalogue (models.py) and Hugging Face configs (hf_config.py).

`expert_bytes` is one routed expert's weights as stored (gate, up and down projections); `dense_bytes` is
everything else a batch-1 forward reads: attention, dense MLP layers, shared experts, routers and the LM head
(the embedding is a row lookup, not a read).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# DeepSeek-V3 / V3.1 config.json: n_group 8, topk_group 4 (each token's 8 experts lie in at most 4 of 8 groups
# of 32); keyed by family. A shape whose config says otherwise carries its own (ModelShape.n_group).
GROUP_LIMITED: dict[str, tuple[int, int]] = {"deepseek_v3": (8, 4)}


def group_limit_problem(n_group: object, topk_group: object, num_experts: int, top_k: int) -> str | None:
    """Why (n_group, topk_group) cannot route top_k of num_experts experts, or None: (0, 0) is no limit;
    otherwise n_group divides the experts, 1 <= topk_group <= n_group, and the groups a token may use hold
    at least top_k experts. The one rule for configs (hf_config.py), manifests (trace/checks.py) and the
    router (routing/generator.py)."""
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (n_group, topk_group)):
        return "n_group and topk_group must be whole numbers"
    assert isinstance(n_group, int) and isinstance(topk_group, int)
    if (n_group, topk_group) == (0, 0):
        return None
    if n_group < 1 or num_experts % n_group or not 1 <= topk_group <= n_group or topk_group * (num_experts // n_group) < top_k:
        return (f"n_group {n_group} must divide the {num_experts} experts, topk_group {topk_group} lie in [1, n_group], "
                f"and topk_group groups hold at least top_k {top_k} experts (or both 0: no limit)")
    return None


@dataclass(frozen=True)
class ModelShape:
    """The target's shape as the cost model needs it; the same fields as a trace manifest's `model`."""

    name: str
    family: str
    num_layers: int
    moe_layers: tuple[int, ...]
    num_experts: int
    top_k: int
    num_shared_experts: int
    hidden_size: int
    moe_intermediate_size: int
    vocab_size: int
    expert_bytes: int
    dense_bytes: int
    # Bytes of KV cache one context token adds, over all layers (attention reads it every step).
    kv_bytes_per_token: int = 0
    # Weight bytes per parameter as stored (1 for FP8, 2 for BF16, 0.53 for MXFP4 with scales).
    bytes_per_param: float = 2.0
    source: str = ""
    # Weights in block FP8 with dynamic activation quantisation (W8A8, as SGLang and vLLM serve DeepSeek's
    # and Qwen's FP8 checkpoints): every quantised GEMM is preceded by its own activation-quantisation kernel.
    act_quant: bool = False
    # DeepSeek-style group-limited routing (`n_group` groups of experts, a token's top-k within its best
    # `topk_group`), where it differs from what the family implies (GROUP_LIMITED, read through `group_limits`):
    # None for every catalogue shape, (0, 0) for a config that turns it off (a deepseek_v3 config with n_group 1).
    n_group: int | None = None
    topk_group: int | None = None

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layers)

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up, down), for its FLOPs: 2 per parameter per token."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_params(self) -> float:
        return self.dense_bytes / self.bytes_per_param

    @property
    def group_limits(self) -> tuple[int, int]:
        """(n_group, topk_group) the router limits a token to: the shape's own where it carries them (a config.json
        whose limits differ from its family's), else its family's; (0, 0) is no limit."""
        if self.n_group is not None:
            return self.n_group, self.topk_group or 0
        return GROUP_LIMITED.get(self.family, (0, 0))

    @property
    def attention(self) -> str:
        """"mla" (DeepSeek's multi-head latent attention) or "gqa" (grouped-query, MHA included)."""
        return "mla" if self.family.startswith("deepseek") else "gqa"

    def kernels_per_layer(self, moe: bool) -> int:
        """Kernels on one decoder layer's critical path in a batch-1 decode step, the fused count (each
        operation one kernel; collectives are counted apart, by the placement). For DeepSeek it matches
        late-2025 SGLang (about 31 with act_quant against 30); SGLang's GQA MoE paths launch more (Qwen3-MoE
        about 17 against 12, gpt-oss about 19, GLM-4.5 about 29 against 15: README, fidelity section), so
        the serving profile's fitted kernel_latency_s is a cost per *counted* kernel, not per launch:

        - attention, GQA: input norm, qkv projection, q/k norm + rope, attention, o projection = 5;
          MLA (absorbed, decode): norm, q_a, q_a norm, q_b, kv_a, kv norm + rope, q absorb, attention,
          v absorb, o projection = 10;
        - MoE: post-attention norm, router GEMM, top-k, grouped gate/up, activation, grouped down,
          combine = 7, plus gate/up, activation, down of the shared experts = 3;
        - dense MLP: post-attention norm, gate/up, activation, down = 4;
        - with `act_quant`, one per_token_group_quant_fp8 kernel before each quantised GEMM (SGLang's
          apply_w8a8_block_fp8_linear in python/sglang/srt/layers/quantization/fp8_utils.py and its
          fused-MoE invoke_fused_moe_kernel quantise the activations in a kernel of their own; vLLM's
          fp8_utils.py the same): attention GQA qkv, o = 2, MLA q_a, q_b, kv_a, o and the two absorbed
          bmm's, which SGLang runs in FP8 after per_tensor_quant_mla_fp8 (forward_absorb in
          python/sglang/srt/models/deepseek_v2.py) = 6; routed gate/up, down = 2; shared experts 2;
          dense MLP 2.
        """
        mla = self.attention == "mla"
        attn = (10 if mla else 5) + ((6 if mla else 2) if self.act_quant else 0)
        quant = 2 if self.act_quant else 0
        if not moe:
            return attn + 4 + quant
        return attn + 7 + quant + ((3 + quant) if self.num_shared_experts else 0)

    @property
    def kernels_per_step(self) -> int:
        """Sum of kernels_per_layer over the decoder layers."""
        n_moe = self.num_moe_layers
        return n_moe * self.kernels_per_layer(True) + (self.num_layers - n_moe) * self.kernels_per_layer(False)

    def to_manifest(self) -> dict[str, Any]:
        d = asdict(self)
        d["moe_layers"] = list(self.moe_layers)
        if not self.act_quant:  # absent where false: manifests (and trace fingerprints) of other shapes stay as before
            del d["act_quant"]
        if self.n_group is None:  # absent where the family's: the same
            del d["n_group"], d["topk_group"]
        return d

    @classmethod
    def from_manifest(cls, m: dict[str, Any]) -> ModelShape:
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in m.items() if k in known}
        kw["moe_layers"] = tuple(int(x) for x in m["moe_layers"])
        return cls(**kw)


@dataclass(frozen=True)
class Arch:
    """Just enough architecture to derive the bytes; kept to show the arithmetic."""

    layers: int
    first_moe: int  # layers before it are dense, the rest MoE (unless `moe_layer_ids` says otherwise)
    experts: int
    top_k: int
    shared: int
    hidden: int
    moe_inter: int
    dense_inter: int  # intermediate size of the dense (non-MoE) MLP layers
    vocab: int
    attn_params: int  # per layer
    kv_per_token_per_layer: int  # elements cached per token per layer
    expert_bytes_per_param: float
    dense_bytes_per_param: float
    lm_head_bytes_per_param: float = 2.0  # LM heads stay BF16 in every release below
    kv_bytes_per_elem: float = 2.0
    fused_expert_params: int | None = None  # when an expert is not 3*hidden*moe_inter
    extra: dict[str, int] = field(default_factory=dict)
    # For configs beyond the catalogue (hf_config.py): MoE layers that are not one run from `first_moe` to the end
    # (Llama-4 interleaves dense and MoE layers, Qwen2-MoE's decoder_sparse_step), a shared expert whose size is not
    # moe_inter (Qwen2-MoE's shared_expert_intermediate_size), and routers stored wider than BF16 (an FP32 model).
    moe_layer_ids: tuple[int, ...] | None = None
    shared_inter: int | None = None
    router_bytes_per_param: float = 2.0
    # Layers of several kinds (hf_layers.py): attention parameters and cached elements per token summed over the
    # layers (in place of layers x the per-layer figures), and the elements of recurrent state (linear-attention
    # layers) a step reads and writes whatever the context, charged like weights at the dense dtype, twice.
    attn_params_total: int | None = None
    kv_per_token_total: int | None = None
    state_elems: int = 0

    def shape(self, name: str, family: str, source: str, n_group: int | None = None,
              topk_group: int | None = None) -> ModelShape:
        moe_layers = self.moe_layer_ids if self.moe_layer_ids is not None else tuple(range(self.first_moe, self.layers))
        n_moe = len(moe_layers)
        expert_params = self.fused_expert_params or 3 * self.hidden * self.moe_inter
        expert_bytes = round(expert_params * self.expert_bytes_per_param)
        attn = self.attn_params_total if self.attn_params_total is not None else self.layers * self.attn_params
        kv = self.kv_per_token_total if self.kv_per_token_total is not None else self.layers * self.kv_per_token_per_layer
        dense_params = (
            attn
            + (self.layers - n_moe) * 3 * self.hidden * self.dense_inter
            + n_moe * self.shared * 3 * self.hidden * (self.shared_inter or self.moe_inter)
        )
        router_bytes = n_moe * self.experts * self.hidden * self.router_bytes_per_param  # BF16 router weights
        dense_bytes = round(
            dense_params * self.dense_bytes_per_param
            + router_bytes
            + self.vocab * self.hidden * self.lm_head_bytes_per_param
            + 2 * self.state_elems * self.kv_bytes_per_elem  # read and written once a step
        )
        return ModelShape(
            name=name,
            family=family,
            num_layers=self.layers,
            moe_layers=moe_layers,
            num_experts=self.experts,
            top_k=self.top_k,
            num_shared_experts=self.shared,
            hidden_size=self.hidden,
            moe_intermediate_size=self.moe_inter,
            vocab_size=self.vocab,
            expert_bytes=expert_bytes,
            dense_bytes=dense_bytes,
            kv_bytes_per_token=round(kv * self.kv_bytes_per_elem),
            bytes_per_param=self.expert_bytes_per_param,
            source=source,
            n_group=n_group,
            topk_group=topk_group,
        )


def gqa_params(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """Attention parameters of one grouped-query layer: q, k, v and o projections."""
    return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
