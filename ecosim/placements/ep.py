"""`ep:N`: experts split in blocks over N devices, two all-to-alls per MoE layer, slowest device wins."""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.sharded import Sharded, _degree


@dataclass(frozen=True)
class ExpertParallel(Sharded):
    syntax = "ep:N"
    summary = "ep:N (experts split over N devices)"

    @classmethod
    def parse(cls, text: str) -> ExpertParallel | None:
        n = _degree(text, "ep")
        return cls(tp=1, ep=n) if n else None

    def __str__(self) -> str:
        return f"ep:{self.ep}"
