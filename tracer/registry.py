"""Short names for the target models the tracer knows: what to load, how, and the default draft.

A default draft is any `--draft` value (`tracer.drafts.registry`): another checkpoint that shares
the target's tokenizer (checked at load time), ``early-exit:N`` (the target's own first N layers,
then its final norm and LM head), or ``mtp`` (a DeepSeek-V3 checkpoint's own MTP module).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A known target: `hub_id` to load, its `family` (config.model_type) and default `draft`."""

    name: str
    hub_id: str
    family: str
    draft: str
    attn: str = "sdpa"
    note: str = ""


ENTRIES = [
    Entry("deepseek-v3.1", "deepseek-ai/DeepSeek-V3.1", "deepseek_v3", "early-exit:6",
          note="FP8 weights; no smaller model shares its tokenizer, so the default draft is the first 6 layers "
               "(3 dense + 3 MoE); --draft mtp drafts with its own MTP module (checkpoint layer 61, as SGLang's "
               "NextN), which validate's timing bench cannot rebuild yet"),
    Entry("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "qwen3_moe", "Qwen/Qwen3-0.6B",
          note="Qwen3-0.6B shares the Qwen3 tokenizer"),
    Entry("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "qwen3_moe", "Qwen/Qwen3-0.6B",
          note="Qwen3-0.6B shares the Qwen3 tokenizer"),
    Entry("gpt-oss-120b", "openai/gpt-oss-120b", "gpt_oss", "openai/gpt-oss-20b", attn="eager",
          note="MXFP4 experts; eager attention only (attention sinks); gpt-oss-20b shares o200k_harmony"),
    Entry("gpt-oss-20b", "openai/gpt-oss-20b", "gpt_oss", "early-exit:4", attn="eager",
          note="MXFP4 experts; eager attention only; no smaller gpt-oss exists, so early exit"),
    Entry("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "mixtral", "mistralai/Mistral-7B-v0.1",
          note="Mistral-7B-v0.1 shares the Mixtral tokenizer"),
    Entry("olmoe-1b-7b", "allenai/OLMoE-1B-7B-0924", "olmoe", "allenai/OLMo-1B-0724-hf",
          note="OLMo-1B-0724 uses the same GPT-NeoX-derived Dolma tokenizer"),
]
REGISTRY: dict[str, Entry] = {e.name: e for e in ENTRIES}
ALIASES = {
    "deepseek-v3": "deepseek-v3.1", "qwen3-235b": "qwen3-235b-a22b", "qwen3-30b": "qwen3-30b-a3b",
    "mixtral": "mixtral-8x7b", "olmoe": "olmoe-1b-7b",
}


def lookup(name: str) -> Entry | None:
    """The entry for a short name (case-insensitive, aliases allowed), or for its hub id."""
    key = ALIASES.get(name.lower(), name.lower())
    if key in REGISTRY:
        return REGISTRY[key]
    return next((e for e in ENTRIES if e.hub_id.lower() == name.lower()), None)


def known_names() -> str:
    return ", ".join(REGISTRY)
