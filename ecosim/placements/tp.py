"""`tp:N`: every expert sharded N ways (each device reads 1/N of the union), 2 all-reduces per layer."""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.sharded import OneDegree


@dataclass(frozen=True)
class TensorParallel(OneDegree):
    syntax = "tp:N"
    summary = "tp:N (every expert sharded over N devices)"
    degree = "tp"
