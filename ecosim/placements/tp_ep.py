"""`tp:N+ep:M`: M expert groups, each expert sharded N ways inside its group (N*M devices), as
TensorRT-LLM's min-latency DeepSeek recipes run (e.g. TP4 x EP2 on 8 GPUs)."""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.sharded import Sharded, _degree


@dataclass(frozen=True)
class TensorExpertParallel(Sharded):
    syntax = "tp:N+ep:M"
    summary = "tp:N+ep:M (M expert groups, each sharded N ways)"

    @classmethod
    def parse(cls, text: str) -> TensorExpertParallel | None:
        a, plus, b = text.partition("+")
        tp, ep = _degree(a, "tp"), _degree(b, "ep")
        return cls(tp=tp, ep=ep) if plus and tp and ep else None
