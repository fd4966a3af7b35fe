"""`cpu-moe` and `cpu-moe:N`: routed experts in host RAM, computed by the CPU; attention, dense layers, shared
experts and the KV cache on one GPU. `cpu-moe` is every MoE layer (llama.cpp `--cpu-moe`, KTransformers,
ik_llama.cpp `-ot exps=CPU`); `cpu-moe:N` the MoE layers among the first N decoder blocks (llama.cpp
`--n-cpu-moe N`), the others' experts resident on the GPU as under `hbm`.

A host MoE layer costs (hosts.py, ecosim/cost/host.py)

    comb_host( u e / (B_host eta_read eta_engine),  2 n k P_e / F(n) ) + 2 n h a / B_pcie + t_layer

the union's bytes at the host's bandwidth, the tokens' arithmetic at its matrix-vector (n = 1) or small-GEMM
rate, the hidden states' round trip over PCIe and the engine's synchronisation per CPU layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.placements.base import Placement
from ecosim.placements.host_capacity import check_cpu_moe, layer_mask

if TYPE_CHECKING:
    from ecosim.catalog.hosts import Host


@dataclass(frozen=True)
class CpuMoe(Placement):
    blocks: int | None = None  # N of --n-cpu-moe N; None: every MoE layer (--cpu-moe)
    syntax = "cpu-moe[:N]"
    summary = "cpu-moe[:N] (routed experts of every MoE layer, or of the first N blocks, in host RAM on the CPU)"

    @classmethod
    def parse(cls, text: str) -> CpuMoe | None:
        head, colon, n = text.partition(":")
        if head != "cpu-moe":
            return None
        if not colon:
            return cls()
        return cls(int(n)) if n.isdigit() else None

    def __str__(self) -> str:
        return "cpu-moe" if self.blocks is None else f"cpu-moe:{self.blocks}"

    def host_layers(self, model: ModelShape) -> np.ndarray:
        return layer_mask(model, self.blocks)

    def resident_experts(self, model: ModelShape) -> float:
        """Experts per MoE layer on the GPU, averaged over the layers (the host's share is in host RAM)."""
        return float(model.num_experts) * float(1.0 - self.host_layers(model).mean())

    def check(self, model: ModelShape, device: Device, context_tokens: int, memory_fraction: float,
              host: Host | None = None) -> None:
        check_cpu_moe(self, model, device, host, self.host_layers(model), context_tokens, memory_fraction)
