"""The serving engines `tune` recommends for: which speculative settings each can run today, and the
flags that launch one.

A recommendation nobody can launch is no answer: `ecospec-auto` chooses a new tree every step and no
engine implements that, so `tune`'s `best` is always a setting of the user's engine (`--engine`),
and the adaptive policy is reported beside it as what an engine implementing it would gain.

What each engine runs (at batch 1, its documented speculative modes):
- SGLang: static EAGLE trees, `--speculative-num-steps S --speculative-eagle-topk K
  --speculative-num-draft-tokens N`, for an EAGLE-3 head (`EAGLE3`), an MTP layer (`NEXTN`) or a
  separate draft model (`STANDALONE`) (https://docs.sglang.ai/advanced_features/speculative_decoding.html);
- vLLM: chains of `num_speculative_tokens` S in `--speculative-config` (`method` eagle3, mtp or
  draft_model; https://docs.vllm.ai/en/v0.12.0/api/vllm/config/speculative/);
- TensorRT-LLM: one chain of `max_draft_len` S per request (`speculative_config` of the LLM API
  options: `decoding_type` Eagle3, MTP with `num_nextn_predict_layers`, or DraftTarget;
  https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html);
- llama.cpp / ik_llama.cpp: a chain from a separate draft model, exactly S tokens with
  `-md DRAFT --draft-max S --draft-min S --draft-p-min 0` (common/speculative.h; tune_llamacpp.py).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ecosim.catalog.drafts import DRAFT_PATH, draft_kind, sglang_draft_flags
from ecosim.errors import EcoSimError


@dataclass(frozen=True)
class Setting:
    """A static speculative setting: S draft steps, top-k K per level, N tokens verified (K = 1: a chain of S)."""

    steps: int
    topk: int
    draft_tokens: int

    def sglang(self) -> str:
        """SGLang's three tree flags (the draft's own flags go in front: `sglang_draft_flags`)."""
        return (f"--speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
                f"--speculative-num-draft-tokens {self.draft_tokens}")


def _path(path: str | None) -> str:
    return shlex.quote(path) if path else DRAFT_PATH


def _sglang(s: Setting, draft: dict[str, Any], path: str | None) -> str | None:
    head = sglang_draft_flags(draft, path)
    return None if head is None else f"{head} {s.sglang()}"


VLLM_METHODS = {"eagle3": "eagle3", "mtp": "mtp", "model": "draft_model"}


def _vllm(s: Setting, draft: dict[str, Any], path: str | None) -> str | None:
    kind = draft_kind(draft)
    if kind not in VLLM_METHODS:
        return None
    cfg: dict[str, Any] = {"method": VLLM_METHODS[kind]}
    if kind != "mtp":
        cfg["model"] = path or DRAFT_PATH
    cfg["num_speculative_tokens"] = s.steps
    return f"--speculative-config '{json.dumps(cfg)}'"


TRTLLM_TYPES = {"eagle3": "Eagle3", "mtp": "MTP", "model": "DraftTarget"}


def _trtllm(s: Setting, draft: dict[str, Any], path: str | None) -> str | None:
    kind = draft_kind(draft)
    if kind not in TRTLLM_TYPES:
        return None
    if kind == "mtp":
        body = f"decoding_type: MTP, num_nextn_predict_layers: {s.steps}"
    else:
        body = f"decoding_type: {TRTLLM_TYPES[kind]}, max_draft_len: {s.steps}, speculative_model_dir: {path or DRAFT_PATH}"
    return f"--extra_llm_api_options FILE.yaml with speculative_config: {{{body}}}"


def _llamacpp(s: Setting, draft: dict[str, Any], path: str | None) -> str | None:
    if draft_kind(draft) != "model":
        return None
    return f"-md {_path(path)} --draft-max {s.steps} --draft-min {s.steps} --draft-p-min 0"


@dataclass(frozen=True)
class Engine:
    """A serving engine as `tune` speaks to it."""

    name: str
    trees: bool  # runs trees of top-k K > 1 (else chains only)
    launch: Callable[[Setting, dict[str, Any], str | None], str | None]  # flags, or None: no mode for this draft kind
    profiles: tuple[str, ...]  # serving profiles (name prefixes) describing a release of it
    off: str  # how to serve without speculation

    def runs(self, s: Setting, draft: dict[str, Any]) -> bool:
        return (self.trees or s.topk == 1) and self.launch(s, draft, None) is not None

    def flags(self, s: Setting, draft: dict[str, Any], path: str | None) -> str | None:
        return self.launch(s, draft, path) if self.runs(s, draft) else None


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("sglang", True, _sglang, ("sglang", "cuda-graphs", "eager", "ktransformers"), "leave out --speculative-algorithm"),
    Engine("vllm", False, _vllm, ("vllm",), "leave out --speculative-config"),
    Engine("trtllm", False, _trtllm, ("trtllm",), "leave out speculative_config"),
    Engine("llama.cpp", False, _llamacpp, ("llama.cpp", "ik_llama.cpp"), "run without -md"),
)}


def get_engine(name: str) -> Engine:
    e = ENGINES.get(name.strip().lower())
    if e is None:
        raise EcoSimError(f"--engine {name!r}: expected one of {', '.join(ENGINES)}")
    return e


def engine_for(profile: str, host: bool) -> Engine:
    """The engine a serving profile describes a release of (the longest matching prefix); with none, llama.cpp
    where experts live in host RAM (`host`), else SGLang."""
    best = max(((p, e) for e in ENGINES.values() for p in e.profiles if profile.lower().startswith(p)),
               key=lambda pe: len(pe[0]), default=None)
    if best is not None:
        return best[1]
    return ENGINES["llama.cpp"] if host else ENGINES["sglang"]


__all__ = ["ENGINES", "Engine", "Setting", "engine_for", "get_engine"]
