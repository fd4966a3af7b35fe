"""`tp:N`: every expert sharded N ways (each device reads 1/N of the union), 2 all-reduces per layer."""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.sharded import Sharded, _degree


@dataclass(frozen=True)
class TensorParallel(Sharded):
    syntax = "tp:N"
    summary = "tp:N (every expert sharded over N devices)"

    @classmethod
    def parse(cls, text: str) -> TensorParallel | None:
        n = _degree(text, "tp")
        return cls(tp=n, ep=1) if n else None

    def __str__(self) -> str:
        return f"tp:{self.tp}"
