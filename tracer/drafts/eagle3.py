"""`eagle3:PATH`: an EAGLE-3 head (Li et al., 2025) over the target's low, mid and high features.

Architecture and tensor names as the public heads ship them (SpecForge / SGLang
``LlamaForCausalLMEagle3``; config ``draft_vocab_size``, ``target_hidden_size``,
``eagle_config.eagle_aux_hidden_state_layer_ids``)::

    fc.weight                               (H, 3 * H_target)   fuses the three target features
    midlayer.input_layernorm.weight         (H,)                norm of the token embedding
    midlayer.hidden_norm.weight             (H,)                norm of the fused feature
    midlayer.self_attn.{q,k,v}_proj.weight  (heads*d, 2H)       attention over [embedding; feature]
    midlayer.self_attn.o_proj.weight        (H, heads*d)
    midlayer.post_attention_layernorm.weight, midlayer.mlp.{gate,up,down}_proj.weight
    norm.weight, lm_head.weight             (V_draft, H)        its own LM head over a draft vocabulary
    d2t                                     (V_draft,) int64    target id = draft id + d2t[draft id]
    t2d                                     (V_target,) bool    which target ids the draft vocabulary holds

One step (EAGLE-3, section 3; SGLang ``LlamaDecoderLayer.forward`` of llama_eagle3)::

    g   = fc([f_low; f_mid; f_high])           (the target's features; a chained step uses the
                                                head's own previous output h instead, unprojected)
    x   = [RMSNorm_in(Emb(token)); RMSNorm_hidden(g)]
    a   = g + o_proj(Attention(q(x), k(x), v(x)))
    h   = a + MLP(RMSNorm_post(a))             (the output feature, fed to the next step)
    p   = softmax(lm_head(RMSNorm(h)))         over the draft vocabulary, mapped by d2t

The embedding is the target's (`embed_tokens.weight` is used when the head ships one). The
features are the outputs of the target's decoder layers listed in
``eagle_aux_hidden_state_layer_ids`` (SGLang's default without it: layers 1, L/2 - 1 and L - 4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tracer.drafts.cost import head_info
from tracer.drafts.heads import HeadLM, attach_tap, rms_norm
from tracer.drafts.weights import read_tensors
from tracer.errors import TracerError
from tracer.routing import decoder_layers
from tracer.runner import CachedLM

NAMES = (
    "fc.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
    "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight", "midlayer.post_attention_layernorm.weight",
    "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight",
    "norm.weight", "lm_head.weight", "d2t",
)


@dataclass
class Eagle3Config:
    """The head's shape (its config.json, in the keys the public heads use)."""

    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's
    draft_vocab_size: int
    layer_ids: list[int] = field(default_factory=list)  # eagle_config.eagle_aux_hidden_state_layer_ids
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    def to_json(self) -> dict[str, Any]:
        return {
            "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "hidden_size": self.hidden_size, "target_hidden_size": self.target_hidden_size,
            "intermediate_size": self.intermediate_size, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "vocab_size": self.vocab_size, "draft_vocab_size": self.draft_vocab_size,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "hidden_act": "silu",
            "tie_word_embeddings": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.layer_ids)},
        }

    @classmethod
    def from_json(cls, c: dict[str, Any], num_target_layers: int) -> Eagle3Config:
        hidden = int(c["hidden_size"])
        heads = int(c["num_attention_heads"])
        rope = c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        ids = (c.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if ids is None:  # SGLang's default: the inputs of layers 2, L/2 and L-3
            ids = [1, num_target_layers // 2 - 1, num_target_layers - 4]
        return cls(
            hidden_size=hidden, target_hidden_size=int(c.get("target_hidden_size") or hidden),
            intermediate_size=int(c["intermediate_size"]), num_attention_heads=heads,
            num_key_value_heads=int(c.get("num_key_value_heads") or heads),
            head_dim=int(c.get("head_dim") or hidden // heads), vocab_size=int(c["vocab_size"]),
            draft_vocab_size=int(c.get("draft_vocab_size") or c["vocab_size"]), layer_ids=[int(i) for i in ids],
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)), rope_theta=float(rope),
        )


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021), rotate-half layout: x (..., q, heads, d), pos (q,)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = pos.to(torch.float32)[:, None] * inv[None, :]  # (q, d/2)
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None, :], torch.cat([ang, ang], -1).sin()[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return (x * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


class Eagle3Head(nn.Module):
    """The head's weights under the public names; `step` is one forward (the equations above)."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.cfg = cfg
        h, d, nh, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        self.fc = nn.Linear(3 * cfg.target_hidden_size, h, bias=False)
        self.midlayer = nn.Module()
        m = self.midlayer
        m.input_layernorm, m.hidden_norm, m.post_attention_layernorm = (_Norm(h) for _ in range(3))
        m.self_attn = nn.Module()
        m.self_attn.q_proj = nn.Linear(2 * h, nh * d, bias=False)
        m.self_attn.k_proj = nn.Linear(2 * h, nkv * d, bias=False)
        m.self_attn.v_proj = nn.Linear(2 * h, nkv * d, bias=False)
        m.self_attn.o_proj = nn.Linear(nh * d, h, bias=False)
        m.mlp = nn.Module()
        m.mlp.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        m.mlp.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        m.mlp.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.norm = _Norm(h)
        self.lm_head = nn.Linear(h, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool))

    def qkv(self, emb: torch.Tensor, g: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q (.., q, nh, d), k, v (.., q, nkv, d) for embeddings `emb` and (projected) features `g`."""
        m, c = self.midlayer, self.cfg
        x = torch.cat([rms_norm(emb, m.input_layernorm.weight, c.rms_norm_eps),
                       rms_norm(g, m.hidden_norm.weight, c.rms_norm_eps)], -1)
        shp = x.shape[:-1]
        q = m.self_attn.q_proj(x).view(*shp, c.num_attention_heads, c.head_dim)
        k = m.self_attn.k_proj(x).view(*shp, c.num_key_value_heads, c.head_dim)
        v = m.self_attn.v_proj(x).view(*shp, c.num_key_value_heads, c.head_dim)
        return rope(q, pos, c.rope_theta), rope(k, pos, c.rope_theta), v

    def finish(self, g: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(draft-vocab logits, output feature h) from the attention output (.., q, nh*d)."""
        m, c = self.midlayer, self.cfg
        a = g + m.self_attn.o_proj(attn)
        x = rms_norm(a, m.post_attention_layernorm.weight, c.rms_norm_eps)
        h = a + m.mlp.down_proj(nn.functional.silu(m.mlp.gate_proj(x)) * m.mlp.up_proj(x))
        return self.lm_head(rms_norm(h, self.norm.weight, c.rms_norm_eps)), h

    def target_ids(self) -> torch.Tensor:
        """(V_draft,) the target id of each draft id."""
        return torch.arange(self.cfg.draft_vocab_size, device=self.d2t.device) + self.d2t


class _Norm(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention with grouped KV heads: q (q, nh, d), k/v (kv, nkv, d), additive
    mask (q, kv); returns (q, nh*d)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / q.shape[-1] ** 0.5 + mask.float()
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v.float()).to(q.dtype).flatten(1)


class Eagle3LM(HeadLM):
    """An `Eagle3Head` behind its own KV cache, chained as EAGLE-3 runs it."""

    def __init__(self, target: CachedLM, head: Eagle3Head, embed: nn.Module):
        self.head = head
        self.ids = head.target_ids()
        super().__init__(target, embed, 3 * head.cfg.target_hidden_size, head.cfg.hidden_size, target.vocab_size)

    def _clear(self) -> None:
        c = self.head.cfg
        self.k = torch.zeros(0, c.num_key_value_heads, c.head_dim, dtype=self.dtype, device=self.device)
        self.v = self.k.clone()

    def _crop(self, n: int) -> None:
        self.k, self.v = self.k[:n], self.v[:n]

    def _run(self, ids, feats, own, pos, mask):
        g = torch.stack([f if o else self.head.fc(f) for f, o in zip(feats, own.tolist())])
        q, k, v = self.head.qkv(self.embed(ids), g, pos)
        self.k, self.v = torch.cat([self.k, k]), torch.cat([self.v, v])
        logits_d, h = self.head.finish(g, attend(q, self.k, self.v, mask[0, 0]))
        logits = torch.full((len(ids), self.vocab_size), float("-inf"), dtype=logits_d.dtype, device=self.device)
        logits[:, self.ids] = logits_d
        return logits, h


def read_config(path: Path) -> dict[str, Any]:
    f = path / "config.json"
    if not f.is_file():
        raise TracerError(f"--draft eagle3:{path}: no config.json there (an EAGLE-3 head is a directory with config.json and *.safetensors)")
    return json.loads(f.read_text(encoding="utf-8"))


def load_head(path: Path, num_target_layers: int, target_hidden: int, target_vocab: int) -> tuple[Eagle3Head, dict]:
    """The head in `path` (config.json + safetensors), checked against the target's shape."""
    spec = f"--draft eagle3:{path}"
    if not path.is_dir():
        raise TracerError(f"{spec}: no such directory")
    cfg = Eagle3Config.from_json(read_config(path), num_target_layers)
    if cfg.target_hidden_size != target_hidden or cfg.vocab_size != target_vocab:
        raise TracerError(f"{spec}: made for a target of hidden size {cfg.target_hidden_size} and vocabulary "
                          f"{cfg.vocab_size}, not this one ({target_hidden}, {target_vocab})")
    bad = [i for i in cfg.layer_ids if not 0 <= i < num_target_layers]
    if len(cfg.layer_ids) != 3 or bad:
        raise TracerError(f"{spec}: eagle_aux_hidden_state_layer_ids {cfg.layer_ids} must be 3 layers of the target's {num_target_layers}")
    tensors = read_tensors(path, list(NAMES), optional=["t2d", "embed_tokens.weight"], what=f"{spec} (EAGLE-3 head)")
    head = Eagle3Head(cfg)
    state = {k: v for k, v in tensors.items() if k != "embed_tokens.weight"}
    if "t2d" not in state:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[torch.arange(cfg.draft_vocab_size) + state["d2t"]] = True
        state["t2d"] = t2d
    try:
        head.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise TracerError(f"{spec}: tensor shapes do not match its config.json ({str(e).splitlines()[-1].strip()})") from None
    ids = head.target_ids()
    if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size or len(set(ids.tolist())) != len(ids):
        raise TracerError(f"{spec}: d2t maps draft ids outside the target's vocabulary or two onto one")
    return head, tensors


def load(arg: str, target: CachedLM, **_: Any) -> tuple[Eagle3LM, dict[str, Any]]:
    """The EAGLE-3 draft of `target` from the head directory `arg`; taps the target's layers."""
    path = Path(arg).expanduser()
    model = target.model
    n_layers = len(decoder_layers(model))
    emb = model.get_input_embeddings()
    head, tensors = load_head(path, n_layers, int(emb.weight.shape[1]), target.vocab_size)
    head = head.to(device=target.device, dtype=target.dtype).eval()
    embed = emb
    if "embed_tokens.weight" in tensors:
        embed = nn.Embedding.from_pretrained(tensors["embed_tokens.weight"].to(target.device, target.dtype))
    attach_tap(target, [decoder_layers(model)[i] for i in head.cfg.layer_ids])
    c = head.cfg
    info = head_info(
        name=f"{path.resolve().parent.name}/{path.resolve().name}", kind="eagle3", source=str(path), module=head,
        shares=["embedding"] if embed is emb else [],
        shape={"layers": 1, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
               "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
               "head_dim": c.head_dim, "draft_vocab_size": c.draft_vocab_size,
               "target_layers": list(c.layer_ids), "input": "target features (3 layers) + token embedding"},
        kv_bytes_per_token=2 * c.num_key_value_heads * c.head_dim * torch.tensor([], dtype=target.dtype).element_size(),
    )
    return Eagle3LM(target, head, embed), info
