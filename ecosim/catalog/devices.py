"""Accelerators as the cost model sees them: memory bandwidth, compute peaks, links, capacity.

Each device is a JSON data file in data/hardware/ (name, bandwidths in bytes/s, memory in bytes,
dense peaks in FLOP/s, and its `source`). Peaks are dense (no sparsity); link bandwidths are per
direction. A profile written by `validate calibrate` has the same fields plus its measured terms.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecosim.catalog.serving import MEASURED, ServingProfile
from ecosim.errors import EcoSimError

DATA = Path(__file__).parent / "data" / "hardware"


@dataclass(frozen=True)
class Device:
    """One device. Every field can be overridden from the CLI (`--bw 3.3TB/s`) or a profile file."""

    name: str
    hbm_bw: float  # bytes/s, peak memory bandwidth
    hbm_bytes: float  # bytes of device memory
    peak_bf16: float  # FLOP/s, dense
    peak_fp8: float  # FLOP/s, dense (= bf16 where the device has no FP8 path)
    link_bw: float  # bytes/s per direction between devices (NVLink / Infinity Fabric)
    pcie_bw: float  # bytes/s per direction host <-> device
    # Fitted by `validate calibrate` for measured profiles; data-sheet devices leave them None.
    step_overhead_s: float | None = None
    bw_efficiency: float | None = None
    compute_efficiency: float | None = None
    overlap: str | None = None  # "max" or "sum": how memory and compute time combine (see ecosim/cost/)
    # Draft-side seconds per speculative step as measured by `validate calibrate` (feed the accepted
    # tokens, expand the tree, select); cost.CostModel.draft_time uses it unless --draft-time is given.
    draft_time_s: float | None = None
    # The serving terms a measured profile carries (None: a data-sheet device; the CLI's --profile applies).
    serving: ServingProfile | None = None
    source: str = ""
    # s per collective that the link itself adds beyond the serving profile's collective latency: 0 on one
    # node's NVLink (the profile's fitted latency holds it); an inter-node fabric (InfiniBand) adds its hops.
    link_latency_s: float = 0.0
    # s per kernel that this platform's graph replay adds beyond the NVIDIA CUDA-graph reference on which the
    # serving profiles' kernel_latency_s is fitted (0 on NVIDIA devices; the HIP runtime's per-node cost on AMD).
    graph_node_s: float = 0.0
    # The link between nodes (per GPU, per direction) and the latency it adds per collective, for a placement that
    # spans several nodes (a published row's `sim.nodes`); None where the data file gives no inter-node fabric.
    internode_link_bw: float | None = None
    internode_latency_s: float | None = None

    def replace(self, **changes: Any) -> Device:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def across_nodes(self) -> Device:
        """This device with its collectives over the inter-node fabric: a group that spans nodes is as fast as its
        slowest hop (SGLang disables its NVLink-only custom all-reduce there: every collective is NCCL's)."""
        if self.internode_link_bw is None or self.internode_latency_s is None:
            raise EcoSimError(f"device {self.name}: no inter-node link in its data file (internode_link_bw, internode_latency_s)")
        return self.replace(link_bw=self.internode_link_bw, link_latency_s=self.internode_latency_s)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["serving"] = self.serving.to_dict() if self.serving else None
        if not self.graph_node_s:  # absent where 0: sweep ids (grid.canonical_json) of devices without it stay as before
            del d["graph_node_s"]
        # the inter-node link prices nothing until across_nodes() moves it into link_bw / link_latency_s (which are
        # written): left out, so a device's sweep ids do not change with it
        del d["internode_link_bw"], d["internode_latency_s"]
        return d


def _device(data: dict[str, Any]) -> Device:
    fields = {f.name for f in dataclasses.fields(Device)}
    kw = {k: v for k, v in data.items() if k in fields}
    if isinstance(kw.get("serving"), dict):
        kw["serving"] = ServingProfile.from_dict(kw["serving"], MEASURED)
    elif "calibration" in data:  # written by validate calibrate before profiles carried serving terms
        kw["serving"] = MEASURED
    return Device(**kw)


def load_profile(path: Path) -> Device:
    """A hardware JSON file: a data sheet's fields, or a profile written by `validate calibrate`; checked at the gate
    (ecosim/gate/profiles.py: every field's type and range), so a bad one is one line naming the field."""
    from ecosim.gate import load
    from ecosim.gate.profiles import HARDWARE

    data = load(HARDWARE, path, undeclared={f.name for f in dataclasses.fields(Device)})
    try:
        return _device(data)
    except (ValueError, TypeError, AttributeError) as e:
        raise EcoSimError(f"{path}: not a readable hardware profile ({e})") from None


DEVICES: dict[str, Device] = {p.stem: load_profile(p) for p in sorted(DATA.glob("*.json"))}


def get_device(name: str) -> Device:
    """A catalogue device by name, or a hardware profile JSON path."""
    if name.lower() in DEVICES:
        return DEVICES[name.lower()]
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return load_profile(path)
    raise EcoSimError(f"unknown hardware {name!r}; known: {', '.join(sorted(DEVICES))}, or a profile .json path")
