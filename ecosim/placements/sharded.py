"""Weights split over devices: `tp:N`, `ep:N` and `tp:N+ep:M` are one shape with two degrees.

- tensor parallel degree `tp`: every expert (and every dense matrix) is cut `tp` ways, so a device
  reads 1/tp of each expert in the union; the partial sums meet in an all-reduce.
- expert parallel degree `ep`: experts in `ep` contiguous blocks (device group g holds experts
  [g*E/ep, (g+1)*E/ep), as DeepEP / SGLang / vLLM place them); each group reads its own part of
  the union, the layer waits for the slowest group, and the tokens cross the link twice
  (dispatch and combine all-to-alls).

Attention and the other dense weights are tensor parallel over all tp*ep devices (one all-reduce
after attention); the KV cache is split the same way. Per transformer layer:

    tp only:   2 all-reduces (after attention, after the MLP/MoE)            (Megatron-LM TP)
    ep (>1):   MoE layer: 1 all-reduce (attention) + 2 all-to-alls; tp > 1 adds the MoE all-reduce
               dense layer: 2 all-reduces
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError
from ecosim.gate.values import INT16_MAX, ascii_int, warn
from ecosim.placements.base import Placement


@dataclass(frozen=True)
class Sharded(Placement):
    tp: int = 1
    ep: int = 1

    @classmethod
    def parse(cls, text: str) -> Sharded | None:
        return None  # the concrete kinds below parse their own syntax

    def __str__(self) -> str:
        return f"tp:{self.tp}+ep:{self.ep}"

    @property
    def devices(self) -> int:
        return self.tp * self.ep

    @property
    def groups(self) -> int:
        return self.ep

    @property
    def expert_fraction(self) -> float:
        return 1.0 / self.tp

    @property
    def dense_share(self) -> int:
        return self.devices

    def allreduces(self, moe: bool) -> int:
        if self.devices == 1:
            return 0
        if moe and self.ep > 1:
            return 1 + (self.tp > 1)
        return 2

    def alltoalls(self, moe: bool) -> int:
        return 2 if moe and self.ep > 1 else 0

    def resident_experts(self, model: ModelShape) -> float:
        return -(-model.num_experts // self.ep) / self.tp

    def check_model(self, model: ModelShape) -> None:
        """ep:N beyond the experts leaves devices without any (refused); an uneven split is legal but the
        slowest group sets each layer's time (said once)."""
        e = model.num_experts
        if self.ep > e:
            raise EcoSimError(f"placement {self}: {model.name} has {e} experts per layer, so {self.ep - e} of the {self.ep} "
                              f"expert groups would hold none; allowed: ep:N with N <= {e}")
        if e % self.ep:
            big = -(-e // self.ep)
            warn(f"placement {self}: {model.name}'s {e} experts split unevenly over {self.ep} groups ({big} on the largest, "
                 f"{e // self.ep} on the smallest); the largest sets each layer's time (N dividing {e} splits them evenly)")


@dataclass(frozen=True)
class OneDegree(Sharded):
    """A kind named by one degree, `tp:N` or `ep:N` (`degree` says which; the other is 1)."""

    degree: ClassVar[str] = ""

    @classmethod
    def parse(cls, text: str) -> OneDegree | None:
        n = _degree(text, cls.degree)
        return cls(**{cls.degree: n}) if n else None

    def __str__(self) -> str:
        return f"{self.degree}:{getattr(self, self.degree)}"


def _degree(text: str, prefix: str) -> int | None:
    """N of `prefix:N`: ASCII digits (no `²`), in [1, 32767] (no model has more experts or a larger group);
    None where the text is another placement's syntax."""
    head, _, n = text.partition(":")
    if head != prefix or not n.isdigit():  # isdigit: any script's digits, so `ep:²` is refused by name below
        return None
    return ascii_int(n, f"placement {text!r}", 1, INT16_MAX)
