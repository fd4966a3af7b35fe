"""`ep:N`: experts split in blocks over N devices, two all-to-alls per MoE layer, slowest device wins."""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.sharded import OneDegree


@dataclass(frozen=True)
class ExpertParallel(OneDegree):
    syntax = "ep:N"
    summary = "ep:N (experts split over N devices)"
    degree = "ep"
