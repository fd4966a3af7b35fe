"""`mtp`: DeepSeek-V3's multi-token-prediction module, read from the target checkpoint's extra layer.

DeepSeek-V3 (technical report, section 2.2, eq. 21-23) ships one MTP module as layer N =
``num_hidden_layers`` of its checkpoint (``model.layers.61.*`` in DeepSeek-V3/V3.1; transformers
skips it when loading). For token t_{i+1} and the main model's representation h_i::

    h'_i   = eh_proj([enorm(Emb(t_{i+1})); hnorm(h_i)])          (eq. 21; SGLang's order: embedding first)
    h_i^1  = TRM(h'_i)                                           (eq. 22; one decoder block, MLA + MoE)
    P      = softmax(head(shared_head.norm(h_i^1)))              (eq. 23; the target's LM head)

`h_i` is the target's final hidden state after its final norm (what SGLang hands its NextN draft);
a chained step feeds the module's own ``shared_head.norm`` output back as h (SGLang runs the one
MTP layer `speculative_num_steps` times this way). The embedding and LM head are the target's, as
in SGLang (the checkpoint's ``model.layers.N.embed_tokens`` / ``shared_head.head`` copies are not
read). Tensors read, from safetensors only: ``model.layers.N.{eh_proj,enorm,hnorm,
shared_head.norm}.weight`` and the block under ``model.layers.N.{input_layernorm,self_attn,
post_attention_layernorm,mlp}``; per-expert tensors are fused into transformers' layout, FP8
tensors with a ``weight_scale_inv`` are dequantised (128 x 128 blocks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tracer.drafts.cost import head_info
from tracer.drafts.heads import HeadLM, attach_tap, rms_norm
from tracer.drafts.weights import read_tensors
from tracer.errors import TracerError
from tracer.loading import Source, locate
from tracer.runner import CachedLM

OWN = ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight")
BLOCK = ("input_layernorm.", "self_attn.", "post_attention_layernorm.", "mlp.")


def checkpoint_dir(src: Source, n: int | str) -> Path:
    """The directory holding the target's safetensors (the local dir, or its hub-cache snapshot)."""
    what = f"--draft mtp: the MTP layer model.layers.{n}.{{eh_proj,enorm,hnorm,shared_head}} of {src.ref}"
    if src.local:
        return Path(src.ref)
    try:
        locate(src)
    except TracerError as e:
        raise TracerError(f"{what} cannot be read: {e}") from None
    from huggingface_hub import try_to_load_from_cache

    for name in ("model.safetensors.index.json", "model.safetensors"):
        hit = try_to_load_from_cache(src.ref, name)
        if isinstance(hit, str):
            return Path(hit).parent
    raise TracerError(f"{what} cannot be read: no safetensors of it in the Hugging Face cache")


class MTPModule(nn.Module):
    """eh_proj, enorm, hnorm, the decoder block and shared_head.norm, under the checkpoint's names."""

    def __init__(self, config: Any, layer_idx: int):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

        h = int(config.hidden_size)
        self.eps = float(config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.enorm, self.hnorm = _Norm(h), _Norm(h)
        self.block = DeepseekV3DecoderLayer(config, layer_idx)
        self.block.self_attn.layer_idx = 0  # its own one-layer cache
        self.shared_head = nn.Module()
        self.shared_head.norm = _Norm(h)


class _Norm(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


def dequant(w: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (128, 128)) -> torch.Tensor:
    """A block-quantised FP8 weight times its per-block inverse scale, in float32."""
    s = scale.float().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)
    return w.float() * s[: w.shape[0], : w.shape[1]]


def block_state(tensors: dict[str, torch.Tensor], prefix: str, n_experts: int, block: tuple[int, int]) -> dict[str, torch.Tensor]:
    """The decoder block's tensors renamed to `DeepseekV3DecoderLayer`'s state dict (experts fused)."""
    raw = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix) and k[len(prefix):].startswith(BLOCK)}
    for k in [k for k in raw if k.endswith(".weight_scale_inv")]:
        w = k.removesuffix("_scale_inv")
        raw[w] = dequant(raw[w], raw.pop(k), block)
    out = {k: v for k, v in raw.items() if ".experts." not in k or not k.split(".experts.")[1][0].isdigit()}
    if any(".experts.0." in k for k in raw):
        gate = [raw[f"mlp.experts.{e}.gate_proj.weight"] for e in range(n_experts)]
        up = [raw[f"mlp.experts.{e}.up_proj.weight"] for e in range(n_experts)]
        out["mlp.experts.gate_up_proj"] = torch.stack([torch.cat([g, u]) for g, u in zip(gate, up)])
        out["mlp.experts.down_proj"] = torch.stack([raw[f"mlp.experts.{e}.down_proj.weight"] for e in range(n_experts)])
    return out


def load_module(ckpt: Path, config: Any) -> MTPModule:
    """The MTP module of layer N = num_hidden_layers from the checkpoint in `ckpt`."""
    if getattr(config, "model_type", "") not in ("deepseek_v3", "deepseek_v32"):
        raise TracerError(f"--draft mtp: needs a DeepSeek-V3 target (its checkpoint carries the MTP layer); this one is {config.model_type}")
    n = int(config.num_hidden_layers)
    prefix = f"model.layers.{n}."
    what = f"--draft mtp (DeepSeek-V3's MTP layer, model.layers.{n}.*)"
    tensors = read_tensors(ckpt, [prefix + k for k in OWN] + [prefix + "input_layernorm.weight"],
                           prefix_ok=[prefix + b for b in BLOCK], what=what)
    module = MTPModule(config, n)
    block = tuple((getattr(config, "quantization_config", None) or {}).get("weight_block_size", (128, 128)))
    state = {k.replace(prefix, ""): v for k, v in tensors.items() if k.removeprefix(prefix) in OWN}
    state.update({"block." + k: v for k, v in block_state(tensors, prefix, int(config.n_routed_experts), block).items()})
    want = set(module.state_dict())
    missing = sorted(want - set(state))
    if missing:
        raise TracerError(f"{what}: {ckpt} lacks {', '.join(prefix + m.removeprefix('block.') for m in missing[:4])}"
                          + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""))
    try:
        module.load_state_dict({k: state[k] for k in want}, strict=True)
    except RuntimeError as e:
        raise TracerError(f"{what}: tensor shapes do not match the target's config ({str(e).splitlines()[-1].strip()})") from None
    return module


class MTPLM(HeadLM):
    """The MTP module behind its own KV cache (one MLA layer), chained as SGLang's NextN draft."""

    def __init__(self, target: CachedLM, module: MTPModule):
        self.mtp = module
        self.rotary = target.model.model.rotary_emb
        self.lm_head = target.model.get_output_embeddings()
        h = int(target.model.config.hidden_size)
        super().__init__(target, target.model.get_input_embeddings(), h, h, target.vocab_size)

    def _clear(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()

    def _crop(self, n: int) -> None:
        drop = self.cache.get_seq_length() - n
        if drop > 0:
            self.cache.crop(-drop)

    def _run(self, ids, feats, own, pos, mask):
        m = self.mtp
        h = torch.stack(feats)
        x = m.eh_proj(torch.cat([rms_norm(self.embed(ids), m.enorm.weight, m.eps), rms_norm(h, m.hnorm.weight, m.eps)], -1))
        x = x[None]  # (1, q, H)
        y = m.block(x, attention_mask=mask, position_ids=pos[None], cache=self.cache, use_cache=True,
                    position_embeddings=self.rotary(x, pos[None]))
        y = y[0] if isinstance(y, tuple) else y
        out = rms_norm(y[0], m.shared_head.norm.weight, m.eps)
        return self.lm_head(out), out


def precheck(src: Source) -> None:
    """Fail before the target loads when its checkpoint cannot hold the MTP layer."""
    if not src.local:
        checkpoint_dir(src, "<num_hidden_layers>")


def load(arg: str, target: CachedLM, *, source: Source, **_: Any) -> tuple[MTPLM, dict[str, Any]]:
    if arg:
        raise TracerError(f"--draft mtp:{arg}: mtp takes no argument (the MTP layer is read from the target's checkpoint)")
    cfg = target.model.config
    module = load_module(checkpoint_dir(source, cfg.num_hidden_layers), cfg)
    module = module.to(device=target.device, dtype=target.dtype).eval()
    attach_tap(target, [target.model.model.norm])
    head = target.model.get_output_embeddings()
    kv = (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * torch.tensor([], dtype=target.dtype).element_size()
    info = head_info(
        name=f"{source.name}:mtp", kind="mtp", source=f"{source.ref} (model.layers.{cfg.num_hidden_layers}.*)",
        module=module, shares=["embedding", "lm_head"], extra=[head.weight], moe=_block_moe(module, cfg),
        shape={"layers": 1, "hidden_size": int(cfg.hidden_size), "vocab_size": int(head.weight.shape[0]),
               "input": "target final hidden state (after its norm) + token embedding"},
        kv_bytes_per_token=kv,
    )
    return MTPLM(target, module), info


def _block_moe(module: MTPModule, cfg: Any) -> dict[str, int] | None:
    experts = getattr(module.block.mlp, "experts", None)
    if experts is None:
        return None
    n = int(cfg.n_routed_experts)
    total = sum(p.numel() * p.element_size() for p in experts.parameters())
    return {"layers": 1, "num_experts": n, "top_k": int(cfg.num_experts_per_tok), "expert_bytes": round(total / n)}
