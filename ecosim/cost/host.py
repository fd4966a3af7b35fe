"""The MoE layers whose routed experts the host computes (`--placement cpu-moe[:N]`, `cpu`):
their seconds from the host's memory and compute (catalog/hosts.py) and the engine's host terms
(catalog/serving.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ecosim.cost.terms import ACT_BYTES

if TYPE_CHECKING:
    from ecosim.cost import CostModel


def host_layer_times(cost: CostModel, union: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Seconds of MoE layers whose routed experts the host computes (cpu-moe[:N], cpu): (steps, layers).

        t = comb_host( u e / (B_host eta_read eta_engine),  2 n k P_e / F(n) )  [+ 2 n h a / B_pcie]  + t_layer
        F(1) = gemv_flops;  F(n > 1) = gemm_flops eta_gemm min(1, m / gemm_rows),  m = n k / u

    (hosts.py; comb_host: the host's overlap, max or sum). The PCIe term is the hidden states' round trip to the
    CPU and back (cpu-moe only: under cpu they never leave the host); t_layer the engine's synchronisation per host
    layer (ServingProfile.host_layer_s). Under experts-only: the union's bytes at the raw host bandwidth."""
    host, m, e = cost.host, cost.model, cost.engine
    assert host is not None
    memory = union * float(m.expert_bytes) / host.bandwidth
    if cost.experts_only:
        return memory
    memory = memory / (host.read_efficiency * e.host_read_efficiency)
    n = tokens.astype(np.float64)[:, None]
    per_expert = n * m.top_k / np.maximum(union, 1)
    rate = host.flops(n, per_expert) * np.where(n > 1, e.host_gemm_efficiency, 1.0)
    compute = 2.0 * n * m.top_k * m.expert_params / rate
    t = np.maximum(memory, compute) if host.overlap == "max" else memory + compute
    if not cost.placement.on_host:
        t = t + 2.0 * n * m.hidden_size * ACT_BYTES / cost.device.pcie_bw
    return t + e.host_layer_s
