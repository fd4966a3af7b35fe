"""Options shared by the commands that price steps (replay, sweep): hardware, placement, cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from ecosim.catalog.devices import Device, get_device
from ecosim.catalog.serving import load_serving
from ecosim.cost import CostConfig
from ecosim.errors import EcoSimError
from ecosim.units import parse_quantity

Hardware = Annotated[str, typer.Option(help="Catalogue device (h100, h200, b200, a100, mi300x) or a profile .json from `validate calibrate`.")]
Bw = Annotated[str | None, typer.Option("--bw", help="Override the device's HBM bandwidth, e.g. 3.3TB/s.")]
Peak = Annotated[str | None, typer.Option(help="Override the dense peak compute, e.g. 989TFLOP/s (applies to BF16 and FP8).")]
LinkBw = Annotated[str | None, typer.Option(help="Override the per-direction device-to-device link bandwidth, e.g. 450GB/s.")]
PcieBw = Annotated[str | None, typer.Option(help="Override the per-direction host-to-device bandwidth, e.g. 64GB/s.")]
Placement = Annotated[str, typer.Option(help="Where weights live: hbm (one device), tp:N (experts sharded over N devices), ep:N (experts split over N), tp:N+ep:M, offload:CAP[:lru|lfu] (CAP experts per layer in HBM).")]
Devices = Annotated[int | None, typer.Option(min=1, help="Number of devices; shorthand for --placement ep:N when N > 1.")]
CostMode = Annotated[str, typer.Option("--cost", help="full: the whole step; experts-only: only routed-expert bytes at raw bandwidth (checkable by hand).")]
BwEff = Annotated[float | None, typer.Option(min=0.01, max=1.0, help="Achieved fraction of peak HBM bandwidth; default: the serving profile's (ignored under experts-only).")]
ComputeEff = Annotated[float | None, typer.Option(min=0.01, max=1.0, help="Achieved fraction of peak FLOP/s; default: the serving profile's.")]
Overhead = Annotated[str | None, typer.Option(help="Fixed time per verification step (sampling, scheduling), e.g. 30us; default: the serving profile's.")]
Profile = Annotated[str | None, typer.Option(help="Serving profile: cuda-graphs, eager, or a .json of its fields (a `validate calibrate` profile too); default: the hardware profile's own terms, else cuda-graphs.")]
DraftTime = Annotated[str | None, typer.Option(help="Draft time per speculative step, e.g. 1.5ms; default: tree depth x draft bytes / bandwidth.")]


@dataclass(frozen=True)
class HardwareArgs:
    hardware: str = "h200"
    bw: str | None = None
    peak: str | None = None
    link_bw: str | None = None
    pcie_bw: str | None = None

    def device(self) -> Device:
        """The catalogue device with the given fields overridden (units parsed strictly)."""
        d = get_device(self.hardware)
        peak = parse_quantity(self.peak, "flops") if self.peak else None
        return d.replace(
            hbm_bw=parse_quantity(self.bw, "bandwidth") if self.bw else None,
            peak_bf16=peak,
            peak_fp8=peak,
            link_bw=parse_quantity(self.link_bw, "bandwidth") if self.link_bw else None,
            pcie_bw=parse_quantity(self.pcie_bw, "bandwidth") if self.pcie_bw else None,
        )


def cost_config(mode: str, bw_efficiency: float | None, compute_efficiency: float | None, step_overhead: str | None,
                draft_time: str | None, profile: str | None = None) -> CostConfig:
    """The CLI's cost options; a value not given stays None so the profile's applies (cost.Terms)."""
    if mode not in ("full", "experts-only"):
        raise EcoSimError(f"--cost must be full or experts-only, got {mode!r}")
    return CostConfig(
        mode=mode,  # type: ignore[arg-type]
        serving=load_serving(profile) if profile is not None else None,
        bw_efficiency=bw_efficiency,
        compute_efficiency=compute_efficiency,
        step_overhead_s=parse_quantity(step_overhead, "time", allow_zero=True) if step_overhead is not None else None,
        draft_time_s=parse_quantity(draft_time, "time", allow_zero=True) if draft_time is not None else None,
    )


def placement_text(placement: str, devices: int | None) -> str:
    if devices is not None and devices > 1:
        if placement.strip().lower() not in ("hbm", f"ep:{devices}"):
            raise EcoSimError(f"--devices {devices} conflicts with --placement {placement}")
        return f"ep:{devices}"
    return placement
