"""The step cost model: one verification forward of the selected subtree -> seconds.

Per MoE layer (batch 1 or a batch of requests, verified together):

    t_layer = max(union_bytes / (bw * bw_eff), routed_flops / (peak * compute_eff))
            [+ misses * expert_bytes / pcie_bw            under offload, before the layer runs]
            [+ 2 * all-to-all of the tokens' activations   under ep:N, max over devices for the rest]

and per step

    t_step = sum(t_layer) + max(dense_bytes / bw_eff, dense_flops / peak_eff)
           + kv_bytes(context) / bw_eff + step_overhead + draft_time

`--cost experts-only` keeps only the routed experts' bytes at the raw bandwidth:
t_step = sum over layers of union * expert_bytes / bw (no compute, dense, attention, overhead or
draft time), so a number can be checked by hand. Nothing here knows about time ordering; the
engines decide which steps happen and in what state (see replay.py and des.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.placement import Placement

ACT_BYTES = 2  # BF16 activations crossing the link under expert parallelism


@dataclass(frozen=True)
class CostConfig:
    """How a step is priced; each field is a CLI option of `ecosim replay`."""

    mode: Literal["full", "experts-only"] = "full"
    bw_efficiency: float = 0.8  # achieved fraction of peak HBM bandwidth (data sheets are peaks)
    compute_efficiency: float = 0.5  # achieved fraction of dense peak FLOP/s
    step_overhead_s: float = 30e-6  # launches, sync, sampling per verification step
    draft_time_s: float | None = None  # per step; None: depth x draft bytes / bandwidth
    link_latency_s: float = 10e-6  # per all-to-all under ep:N
    # How memory and compute time combine: "max" (a roofline: GPUs overlap them) or "sum" (no
    # overlap: small models on CPUs, where `validate calibrate` fits both terms).
    overlap: Literal["max", "sum"] = "max"


def given(*values: Any) -> Any:
    """The first value that is not None: how a calibrated profile's field overrides a setting
    (an explicit 0.0 is a value, not a missing one)."""
    return next(v for v in values if v is not None)


# The costs the model leaves out; printed with every replay so nobody mistakes them for modelled.
NOT_MODELLED = (
    "kernel-level effects inside a layer (launch gaps, tile quantisation)",
    "draft-model compute beyond reading its weights once per tree level",
    "KV-cache growth beyond the context length recorded in the trace",
)


@dataclass
class CostModel:
    """Prices steps for one model shape on one device and placement."""

    model: ModelShape
    device: Device
    placement: Placement = field(default_factory=Placement)
    config: CostConfig = field(default_factory=CostConfig)
    tree_depth: int = 0  # draft forwards per speculative step (from the trace's manifest)
    draft_bytes: float = 0.0

    @property
    def experts_only(self) -> bool:
        return self.config.mode == "experts-only"

    @property
    def bw(self) -> float:
        """Achieved HBM bandwidth (bytes/s); the raw peak under experts-only."""
        eff = 1.0 if self.experts_only else (given(self.device.bw_efficiency, self.config.bw_efficiency))
        return self.device.hbm_bw * eff

    @property
    def peak(self) -> float:
        raw = self.device.peak_fp8 if self.model.bytes_per_param <= 1.0 else self.device.peak_bf16
        return raw * (given(self.device.compute_efficiency, self.config.compute_efficiency))

    @property
    def step_overhead(self) -> float:
        if self.device.step_overhead_s is not None:
            return self.device.step_overhead_s
        return self.config.step_overhead_s

    def draft_time(self, speculative: bool) -> float:
        if self.experts_only or not speculative:
            return 0.0
        if self.config.draft_time_s is not None:
            return self.config.draft_time_s
        if self.device.draft_time_s is not None:  # a calibrated profile measured it
            return self.device.draft_time_s
        return self.tree_depth * self.draft_bytes / self.bw

    def _combine(self, memory: np.ndarray | float, compute: np.ndarray) -> np.ndarray:
        overlap = given(self.device.overlap, self.config.overlap)
        return np.maximum(memory, compute) if overlap == "max" else memory + compute

    def device_layer_times(self, union: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Seconds each device spends on each MoE layer: (steps, layers, devices).

        `union` is (steps, layers, devices) distinct experts each device reads; `tokens` (steps,)
        tokens verified. Routed FLOPs scale with tokens x top_k, shared evenly by the devices.
        """
        eb = float(self.model.expert_bytes)
        if self.experts_only:
            return union * eb / self.bw
        d = union.shape[-1]
        flops = 2.0 * tokens.astype(np.float64)[:, None, None] * self.model.top_k * self.model.expert_params / d
        return self._combine(union * eb / self.bw, flops / self.peak)

    def all_to_all_time(self, tokens: np.ndarray) -> np.ndarray:
        """Seconds per MoE layer of dispatch + combine under ep:N (0 on one device)."""
        d = self.placement.devices if self.placement.kind == "ep" else 1
        if self.experts_only or d == 1:
            return np.zeros(len(tokens))
        m = self.model
        one_way = tokens.astype(np.float64) * m.top_k * m.hidden_size * ACT_BYTES * (d - 1) / d / self.device.link_bw
        return 2 * (one_way + self.config.link_latency_s)

    def copy_time(self, misses: np.ndarray) -> np.ndarray:
        """Seconds to copy missed experts host -> device over PCIe."""
        return misses * float(self.model.expert_bytes) / self.device.pcie_bw

    def layer_times(self, union: np.ndarray, tokens: np.ndarray, misses: np.ndarray | None = None) -> np.ndarray:
        """Seconds per (step, MoE layer), run back to back: the slowest device, the all-to-all, and
        (offload) the copy of the layer's misses before it.

        `union` is (steps, layers) distinct experts read, or (steps, layers, devices) under ep:N;
        `misses` (steps, layers) experts copied over PCIe under offload.
        """
        per_device = union if union.ndim == 3 else union[..., None]
        t = self.device_layer_times(per_device, tokens).max(axis=-1) + self.all_to_all_time(tokens)[:, None]
        if misses is not None:
            t = t + self.copy_time(misses)
        return t

    def other_times(self, tokens: np.ndarray, context: np.ndarray, speculative: bool) -> np.ndarray:
        """Seconds per step outside the routed experts: dense weights, attention, overhead, draft."""
        if self.experts_only:
            return np.zeros(len(tokens))
        m = self.model
        share = self.placement.devices if self.placement.kind == "ep" else 1
        tok = tokens.astype(np.float64)
        dense = self._combine(m.dense_bytes / share / self.bw, 2.0 * tok * m.dense_params / share / self.peak)
        kv = (context.astype(np.float64) + tok) * m.kv_bytes_per_token / share / self.bw
        return dense + kv + self.step_overhead + self.draft_time(speculative)

    def step_times(
        self,
        union: np.ndarray,
        tokens: np.ndarray,
        context: np.ndarray,
        speculative: bool,
        misses: np.ndarray | None = None,
    ) -> np.ndarray:
        """Seconds per step: the MoE layers plus everything else."""
        return self.layer_times(union, tokens, misses).sum(axis=1) + self.other_times(tokens, context, speculative)

    def applied(self) -> dict[str, object]:
        """The values this model prices with once defaults and a profile's fitted fields are
        resolved: what every command prints as used (never null for an applied default)."""
        if self.experts_only:  # routed-expert bytes at the raw bandwidth, nothing else
            return {"bw_efficiency": 1.0, "step_overhead_s": 0.0, "draft_time_s": 0.0}
        used: dict[str, object] = {
            "bw_efficiency": given(self.device.bw_efficiency, self.config.bw_efficiency),
            "compute_efficiency": given(self.device.compute_efficiency, self.config.compute_efficiency),
            "step_overhead_s": self.step_overhead,
            "overlap": given(self.device.overlap, self.config.overlap),
            "draft_time_s": self.draft_time(speculative=True),
        }
        if self.placement.kind == "ep":
            used["link_latency_s"] = self.config.link_latency_s
        return used

    def describe(self) -> dict[str, object]:
        return {
            **self.device.to_dict(),
            "placement": str(self.placement),
            "cost_mode": self.config.mode,
            "overlap": given(self.device.overlap, self.config.overlap),
            "achieved_bw": self.bw,
            "achieved_peak_flops": self.peak,
            "step_overhead_s": 0.0 if self.experts_only else self.step_overhead,
            "not_modelled": list(NOT_MODELLED),
        }
