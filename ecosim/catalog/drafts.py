"""What one draft forward costs, per draft kind, from a trace manifest's `draft` object.

A speculative step of a tree of depth d runs d draft forwards, one per tree level; the first runs
over the tokens the last verify accepted (the "draft extend": SGLang's
forward_draft_extend_after_decode, TensorRT-LLM's first MTP module), so there is no extra forward
for it. Each forward reads `forward_bytes`, runs `forward_kernels` kernels on its critical path and,
sharded like the target's dense weights, `layers` decoder layers' collectives (`moe_layers` of them
MoE layers). ecosim/cost/ prices a speculative step's draft side as

    t_draft = d * (forward_kernels tau_k + forward_bytes / D_dense / (beta B) + layers' collectives)
            + (K_step + d K_level) tau_k + d T_level + [not spec_overlap] T_sync

with K_step, K_level (counted kernels), T_level (fitted latency per draft level), T_sync (fitted
host time) and spec_overlap (the engine's) from the serving profile (catalog/serving.py).

Kinds (the manifest's `draft.kind`; `bytes` and `layers` are used when the manifest gives them):
- `model`: a separate small model: its `bytes`, `layers` decoder layers of 9 kernels + LM head;
- `early-exit` (self-speculative): the target's first `layers` layers and its LM head;
- `mtp`: one MTP module of the target: one MoE decoder layer (top-k experts, its share of the dense
  weights) plus the target's LM head (DeepSeek-V3's MTP; the shared embedding is a lookup);
- `eagle3`: an EAGLE-3 head: one dense decoder layer at the target's hidden size (attention 4 h^2,
  MLP 3 x h x 3h), the fc fusing three hidden states (3 h^2) and a 32k-token draft LM head
  (EAGLE-3's draft_vocab_size), BF16.
A synthetic trace (no kind, `bytes` 0) drafts with an EAGLE-3 head: drafting is never free.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from ecosim.catalog.models import ModelShape

EAGLE3_DRAFT_VOCAB = 32000  # EAGLE-3's draft_vocab_size in its released configs
BF16 = 2

# SGLang's `--speculative-algorithm` for each draft kind, as SGLang's speculative-decoding docs name
# them: an EAGLE-3 head EAGLE3; DeepSeek-V3's MTP module NEXTN (SGLang runs it as EAGLE, its weights
# read from the target checkpoint, so no draft path); a separate small model STANDALONE. An early-exit
# draft (the target's own first layers) has no SGLang algorithm.
SGLANG_ALGORITHMS = {"eagle3": "EAGLE3", "mtp": "NEXTN", "model": "STANDALONE"}
DRAFT_PATH = "DRAFT_PATH"  # stands for the draft's checkpoint when the trace does not name it


@dataclass(frozen=True)
class DraftCost:
    kind: str
    forward_bytes: float
    forward_kernels: int
    assumed: bool  # derived from the target's shape (True) or from the manifest's own numbers
    layers: int = 1  # decoder layers per forward: each pays its collectives when the draft is sharded
    moe_layers: int = 0  # of which MoE layers (mtp, early-exit): the MoE layers' collectives


def _lm_head(m: ModelShape) -> float:
    return float(m.vocab_size * m.hidden_size * BF16)


def draft_kind(draft: dict[str, Any]) -> str:
    """A manifest draft's kind; a synthetic trace's draft with no kind is an EAGLE-3 head (module docstring)."""
    return str(draft.get("kind") or ("eagle3" if not draft.get("bytes") else "model"))


def sglang_draft_flags(draft: dict[str, Any], path: str | None) -> str | None:
    """SGLang's flags naming the draft of a trace: `--speculative-algorithm` for its kind and, for a
    draft with its own checkpoint, `--speculative-draft-model-path` (`path`, else DRAFT_PATH to be
    filled in). None: SGLang has no algorithm for this kind of draft."""
    kind = draft_kind(draft)
    algorithm = SGLANG_ALGORITHMS.get(kind)
    if algorithm is None:
        return None
    flags = f"--speculative-algorithm {algorithm}"
    if kind != "mtp":
        flags += f" --speculative-draft-model-path {shlex.quote(path) if path else DRAFT_PATH}"
    return flags


def draft_cost(draft: dict[str, Any], model: ModelShape) -> DraftCost:
    m = model
    kind = draft_kind(draft)
    given = float(draft.get("bytes") or 0)
    layers = int(draft.get("layers") or 1)
    layer_dense = (m.dense_bytes - _lm_head(m)) / max(m.num_layers, 1)
    if kind == "mtp":
        b = m.top_k * m.expert_bytes + layer_dense + _lm_head(m)
        return DraftCost(kind, given or b, m.kernels_per_layer(True) + 2, not given, 1, 1)
    if kind == "early-exit":
        b = layers * (m.top_k * m.expert_bytes + layer_dense) + _lm_head(m)
        return DraftCost(kind, given or b, layers * m.kernels_per_layer(True) + 2, not given, layers, layers)
    if kind == "model":
        return DraftCost(kind, given, layers * 9 + 2, False, layers, 0)
    h = m.hidden_size
    b = (4 * h * h + 9 * h * h + 3 * h * h + EAGLE3_DRAFT_VOCAB * h) * BF16
    return DraftCost("eagle3", given or b, 5 + 4 + 2, not given, 1, 0)
