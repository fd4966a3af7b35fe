"""llama.cpp / ik_llama.cpp flags for the nearest setting those engines run today, where experts live in host RAM.

Those engines speculate with a separate draft model (`-md`) along a chain: up to `--draft-max` tokens, stopping
early where the draft's top probability falls below `--draft-p-min` (default 0.75; llama.cpp
common/speculative.h), never fewer than `--draft-min`. The nearest runnable setting to what the simulator
prices is tune's best chain of S tokens (tune.recommend's `vllm` entry: a static K = 1 tree), i.e. exactly S
drafted tokens every step: `--draft-max S --draft-min S --draft-p-min 0`. Where the experts live is the
placement: `--cpu-moe` (every MoE layer's experts on the CPU), `--n-cpu-moe N` (those of the first N blocks),
no `-ngl` (the whole model on the CPU).
"""

from __future__ import annotations

from typing import Any

from ecosim.catalog.models import ModelShape
from ecosim.placements import Placement


def placement_flags(placement: Placement, model: ModelShape) -> str | None:
    """The llama.cpp flags that put the weights where `placement` does, or None for a placement they cannot run."""
    mask = placement.host_layers(model)
    if mask is None:
        return None
    if placement.on_host:
        return "-ngl 0"
    blocks = getattr(placement, "blocks", None)
    return "-ngl 99 --cpu-moe" if blocks is None else f"-ngl 99 --n-cpu-moe {blocks}"


def llamacpp(doc: dict[str, Any], placement: Placement, model: ModelShape, draft: str) -> dict[str, Any] | None:
    """The llama.cpp line for tune's recommendation `doc` (tune.recommend), or None where the placement keeps no
    expert in host RAM: flags for the best chain, its speedup over plain decoding, and what the simulator's
    preferred setting would gain beyond it."""
    where = placement_flags(placement, model)
    if where is None:
        return None
    out: dict[str, Any] = {"placement_flags": where}
    chain = doc.get("vllm")
    if chain is None or not chain["pays"]:
        out.update(flags=where, speculate=False,
                   note="no chain of draft tokens beats plain decoding here: run without -md")
        if chain is not None:
            out["chain_speedup_vs_ar"] = chain["speedup_vs_ar"]
    else:
        s = chain["num_speculative_tokens"]
        out.update(flags=f"{where} -md {draft}.gguf --draft-max {s} --draft-min {s} --draft-p-min 0", speculate=True,
                   draft_max=s, chain_speedup_vs_ar=chain["speedup_vs_ar"], chain_ms_per_token=chain["ms_per_token"])
    best = min(doc["overall_ms_per_token"], doc["ar_ms_per_token"])
    base = out.get("chain_ms_per_token", doc["ar_ms_per_token"]) if out["speculate"] else doc["ar_ms_per_token"]
    out["simulator_prefers"] = doc["overall_best"]
    out["gain_of_preferred"] = base / best
    out["gain_of_auto"] = base / doc["auto_ms_per_token"]
    return out


def line(d: dict[str, Any]) -> str:
    """One line for tune's table output."""
    head = f"llama.cpp / ik_llama.cpp: {d['flags']}"
    if d["speculate"]:
        head += f"  ({d['chain_speedup_vs_ar']:.3f}x plain)"
    else:
        head += f"  ({d['note']})"
    return (head + f"; the simulator prefers {d['simulator_prefers']}: {d['gain_of_preferred']:.3f}x beyond it "
            f"(ecospec-auto {d['gain_of_auto']:.3f}x; no engine flag realises an adaptive tree today)")
