"""`cpu`: the whole model in host RAM on the host's CPU, no GPU (llama.cpp without `-ngl`, or the tiny target
`validate` measures here). The host stands in for the device (Host.as_device): dense weights and the KV cache
are read at B_host eta_read and computed at its matrix-vector rate, and each MoE layer is a host layer as under
cpu-moe without the PCIe round trip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.placements.base import Placement
from ecosim.placements.host_capacity import check_cpu, layer_mask

if TYPE_CHECKING:
    from ecosim.catalog.hosts import Host


@dataclass(frozen=True)
class Cpu(Placement):
    syntax = "cpu"
    summary = "cpu (the whole model in host RAM on the CPU)"

    @classmethod
    def parse(cls, text: str) -> Cpu | None:
        return cls() if text == "cpu" else None

    def __str__(self) -> str:
        return "cpu"

    def host_layers(self, model: ModelShape) -> np.ndarray:
        return layer_mask(model, None)

    @property
    def on_host(self) -> bool:
        return True

    def check(self, model: ModelShape, device: Device, context_tokens: int, memory_fraction: float,
              host: Host | None = None) -> None:
        check_cpu(self, model, host, context_tokens)
