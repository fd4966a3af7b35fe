"""`offload:CAP[:lru|lfu]`: one device whose HBM caches CAP experts per MoE layer (LRU or LFU), the
state carried across steps along the policy's own trajectory; misses are copied over PCIe first.
A cache holding every expert of a layer is `hbm` by another name and is refused (check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ecosim.cache import ExpertCache
from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError
from ecosim.gate.values import INT16_MAX, ascii_int
from ecosim.placements.base import Placement


@dataclass(frozen=True)
class Offload(Placement):
    capacity: int = 1
    eviction: Literal["lru", "lfu"] = "lru"
    syntax = "offload:CAP[:lru|lfu]"
    summary = "offload:CAP[:lru|lfu] (CAP experts per layer cached in HBM)"

    @classmethod
    def parse(cls, text: str) -> Offload | None:
        parts = text.split(":")
        if parts[0] != "offload" or len(parts) not in (2, 3) or not parts[1].isdigit():
            return None
        capacity = ascii_int(parts[1], f"placement {text!r}", 1, INT16_MAX)
        eviction = parts[2] if len(parts) == 3 else "lru"
        return cls(capacity, eviction) if eviction in ("lru", "lfu") else None  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"offload:{self.capacity}:{self.eviction}"

    def resident_experts(self, model: ModelShape) -> float:
        return float(min(self.capacity, model.num_experts))

    def cache(self, model: ModelShape) -> ExpertCache:
        return ExpertCache(model.num_moe_layers, model.num_experts, self.capacity, self.eviction)

    @property
    def stateful(self) -> bool:
        return True

    def check(self, model: ModelShape, device: Device, context_tokens: int, memory_fraction: float,
              host: object = None) -> None:
        if self.capacity >= model.num_experts:
            raise EcoSimError(f"offload:{self.capacity} caches all {model.num_experts} experts of every layer of "
                              f"{model.name}: that is hbm by another name; use --placement hbm or a smaller cache")
        super().check(model, device, context_tokens, memory_fraction)
