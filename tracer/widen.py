"""Bandwidth-bound replica of a Qwen3-MoE target: every routed expert widened, function unchanged.

    python -m tracer.widen --model models/ecosim-tiny/target --factor 16 --out ecosim-tiny-x16

A tiny MoE model on a CPU is overhead-bound: one expert of ``ecosim-tiny`` is 147 kB, so a step's
time hardly depends on how many experts its tokens wake up. This module gives each expert
``(factor - 1) * moe_intermediate_size`` extra intermediate units whose **down-projection columns
are zero**. An expert computes ``down @ (act(gate @ x) * (up @ x))``; the extra units' activations
are finite (their gate/up rows are small random numbers) and are multiplied by exact zeros, so the
expert's output, hence the routing of every later layer, the logits and the draft's acceptance,
are those of the original up to float summation order (~1e-6 in fp32), while every expert now
has ``factor`` times as many bytes to read. The router, attention, norms and embeddings are copied
unchanged.

Layout (transformers 5.24, ``Qwen3MoeExperts``, checked by ``_check_layout``): per layer, fused
``mlp.experts.gate_up_proj`` of shape (experts, 2 * moe_intermediate, hidden), gate rows first
then up rows (``linear(x, gate_up_proj[e]).chunk(2, dim=-1)`` gives ``gate, up``), and
``mlp.experts.down_proj`` of shape (experts, hidden, moe_intermediate). ``save_pretrained``
writes the legacy per-expert names (``mlp.experts.{e}.{gate,up,down}_proj.weight``) and
``from_pretrained`` fuses them again, so the replica is an ordinary local checkpoint.

The replica is built by this command, not committed (at factor 16 the ecosim-tiny target's
experts take ~300 MB in fp32).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

__all__ = ["widen_experts", "expert_modules", "expert_bytes", "build_replica", "main"]

_SUPPORTED = ("qwen3_moe",)


def expert_modules(model) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every fused routed-experts module (has gate_up_proj and down_proj)."""
    return [
        (n, m)
        for n, m in model.named_modules()
        if isinstance(getattr(m, "gate_up_proj", None), torch.nn.Parameter)
        and isinstance(getattr(m, "down_proj", None), torch.nn.Parameter)
    ]


def expert_bytes(model) -> int:
    """Bytes of routed-expert weights in the model (all layers, all experts)."""
    return sum(
        m.gate_up_proj.numel() * m.gate_up_proj.element_size()
        + m.down_proj.numel() * m.down_proj.element_size()
        for _, m in expert_modules(model)
    )


def _check_layout(name: str, m, hidden: int, inter: int, num_experts: int) -> None:
    gu, dn = tuple(m.gate_up_proj.shape), tuple(m.down_proj.shape)
    if gu != (num_experts, 2 * inter, hidden) or dn != (num_experts, hidden, inter):
        raise ValueError(
            f"{name}: unexpected experts layout gate_up_proj {gu}, down_proj {dn}; expected "
            f"({num_experts}, {2 * inter}, {hidden}) and ({num_experts}, {hidden}, {inter})"
        )
    for b in ("gate_up_proj_bias", "down_proj_bias"):
        if getattr(m, b, None) is not None:
            raise ValueError(f"{name}: experts with biases ({b}) are not supported")


@torch.no_grad()
def widen_experts(model, factor: int, seed: int = 0, init_std: float | None = None):
    """Widen every routed expert of ``model`` (in place) by ``factor``; returns the model.

    The new gate/up rows are drawn from N(0, init_std) (default: the std of the existing gate/up
    weights of that layer) with a seeded generator; the new down-projection columns are zero.
    ``config.moe_intermediate_size`` is updated so the saved checkpoint reloads.
    """
    cfg = model.config
    if getattr(cfg, "model_type", None) not in _SUPPORTED:
        raise ValueError(f"widen supports {_SUPPORTED}, not {getattr(cfg, 'model_type', None)!r}")
    if int(factor) != factor or factor < 1:
        raise ValueError(f"factor must be a positive integer, got {factor!r}")
    factor = int(factor)
    inter, hidden = cfg.moe_intermediate_size, cfg.hidden_size
    mods = expert_modules(model)
    if not mods:
        raise ValueError("no fused experts modules (gate_up_proj / down_proj) found")
    if factor == 1:
        return model
    new_inter = inter * factor
    extra = new_inter - inter
    gen = torch.Generator().manual_seed(seed)
    for name, m in mods:
        _check_layout(name, m, hidden, inter, cfg.num_experts)
        gu, dn = m.gate_up_proj.data, m.down_proj.data
        E = gu.shape[0]
        gate, up = gu[:, :inter], gu[:, inter:]
        std = float(gu.float().std()) if init_std is None else float(init_std)
        rnd = torch.randn((2, E, extra, hidden), generator=gen, dtype=torch.float32) * std
        rnd = rnd.to(dtype=gu.dtype)
        new_gu = torch.cat([gate, rnd[0].to(gu.device), up, rnd[1].to(gu.device)], dim=1).contiguous()
        new_dn = torch.cat([dn, torch.zeros((E, hidden, extra), dtype=dn.dtype, device=dn.device)], dim=2)
        m.gate_up_proj = torch.nn.Parameter(new_gu, requires_grad=m.gate_up_proj.requires_grad)
        m.down_proj = torch.nn.Parameter(new_dn.contiguous(), requires_grad=m.down_proj.requires_grad)
        if hasattr(m, "intermediate_dim"):
            m.intermediate_dim = new_inter
        if hasattr(m, "intermediate_size"):
            m.intermediate_size = new_inter
    cfg.moe_intermediate_size = new_inter
    return model


def build_replica(model_dir: Path, factor: int, out: Path, seed: int = 0,
                  init_std: float | None = None, check_tokens: int = 64) -> dict:
    """Load ``model_dir``, widen, optionally check against the original, save to ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    before = expert_bytes(model)
    inter0 = model.config.moe_intermediate_size
    ref = None
    if check_tokens:
        g = torch.Generator().manual_seed(seed + 1)
        ids = torch.randint(3, model.config.vocab_size, (1, check_tokens), generator=g)
        with torch.no_grad():
            o = model(input_ids=ids, output_router_logits=True, use_cache=False)
        ref = (ids, o.logits, [lg.topk(model.config.num_experts_per_tok, -1).indices for lg in o.router_logits])
    widen_experts(model, factor, seed=seed, init_std=init_std)
    after = expert_bytes(model)
    report = {
        "source": str(model_dir),
        "factor": factor,
        "seed": seed,
        "moe_intermediate_size": [inter0, model.config.moe_intermediate_size],
        "expert_bytes": [before, after],
        "bytes_per_expert": [before // (model.config.num_experts * len(expert_modules(model))),
                             after // (model.config.num_experts * len(expert_modules(model)))],
    }
    if ref is not None:
        ids, logits0, routes0 = ref
        with torch.no_grad():
            o = model(input_ids=ids, output_router_logits=True, use_cache=False)
        routes1 = [lg.topk(model.config.num_experts_per_tok, -1).indices for lg in o.router_logits]
        report["check"] = {
            "tokens": int(ids.numel()),
            "max_abs_logit_diff": float((o.logits - logits0).abs().max()),
            "routing_identical": all(torch.equal(torch.sort(a, -1).values, torch.sort(b, -1).values)
                                     for a, b in zip(routes0, routes1)),
        }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    try:
        AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    except Exception as e:  # a model directory without a tokenizer still gives a usable replica
        report["tokenizer"] = f"not copied: {e}"
    (out / "WIDENED.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path("models/ecosim-tiny/target"))
    ap.add_argument("--factor", type=int, default=16)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0, help="seed of the extra gate/up rows")
    ap.add_argument("--init-std", type=float, default=None,
                    help="std of the extra gate/up rows (default: that of the layer's own)")
    ap.add_argument("--check-tokens", type=int, default=64,
                    help="compare logits/routing on this many random tokens before saving (0: skip)")
    args = ap.parse_args(argv)
    rep = build_replica(args.model, args.factor, args.out, args.seed, args.init_std, args.check_tokens)
    b0, b1 = rep["expert_bytes"]
    print(f"[widen] {args.model} x{args.factor} -> {args.out}: moe_intermediate_size "
          f"{rep['moe_intermediate_size'][0]} -> {rep['moe_intermediate_size'][1]}, routed experts "
          f"{b0 / 1e6:.1f} MB -> {b1 / 1e6:.1f} MB ({rep['bytes_per_expert'][1]:,} B per expert)")
    if "check" in rep:
        c = rep["check"]
        print(f"[widen] check on {c['tokens']} tokens: max |logit diff| {c['max_abs_logit_diff']:.2e}, "
              f"routing identical: {c['routing_identical']}")
        if not c["routing_identical"] or c["max_abs_logit_diff"] > 1e-3:
            print("[widen] WARNING: replica differs from the original", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
