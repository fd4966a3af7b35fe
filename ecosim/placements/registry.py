"""The placements `--placement` knows, in the order their syntax is tried; one line per kind."""

from __future__ import annotations

from ecosim.errors import EcoSimError
from ecosim.placements.base import Placement
from ecosim.placements.cpu import Cpu
from ecosim.placements.cpu_moe import CpuMoe
from ecosim.placements.dp_attention import DpAttentionExpertParallel
from ecosim.placements.ep import ExpertParallel
from ecosim.placements.hbm import Hbm
from ecosim.placements.offload import Offload
from ecosim.placements.tp import TensorParallel
from ecosim.placements.tp_ep import TensorExpertParallel

PLACEMENTS: list[type[Placement]] = [
    Hbm,
    TensorParallel,
    ExpertParallel,
    TensorExpertParallel,
    Offload,
    DpAttentionExpertParallel,
    CpuMoe,
    Cpu,
]


def register(kind: type[Placement]) -> type[Placement]:
    """Add a placement kind (a plugin or a test); usable as a class decorator."""
    if kind not in PLACEMENTS:
        PLACEMENTS.append(kind)
    return kind


def usage() -> str:
    return ", ".join(k.syntax for k in PLACEMENTS)


def parse_placement(text: str) -> Placement:
    """`hbm`, `tp:8`, `ep:8`, `tp:4+ep:2`, `offload:64[:lfu]`; anything else is a one-line error."""
    key = text.strip().lower()
    for kind in PLACEMENTS:
        try:
            found = kind.parse(key)
        except EcoSimError as e:  # a number out of range or not in ASCII digits: said, with the syntax
            raise EcoSimError(f"{e}; expected one of {usage()}") from None
        if found is not None:
            return found
    raise EcoSimError(f"placement {text!r} not understood; expected one of {usage()} (N >= 1)")
