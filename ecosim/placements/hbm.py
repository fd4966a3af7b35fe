"""`hbm`: every expert resident in one device's memory; a layer reads its union at HBM bandwidth."""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.base import Placement


@dataclass(frozen=True)
class Hbm(Placement):
    syntax = "hbm"
    summary = "hbm (one device)"

    @classmethod
    def parse(cls, text: str) -> Hbm | None:
        return cls() if text == "hbm" else None

    def __str__(self) -> str:
        return "hbm"
