"""Accelerators as the cost model sees them: memory bandwidth, compute peaks, links, capacity.

Sources: NVIDIA H100 / H200 / B200 / A100 and AMD MI300X data sheets (checked December 2026;
restated in ../shared/NOTES.md). Peaks are dense (no sparsity). Link bandwidths are per direction:
NVLink 4 is 900 GB/s bidirectional, so 450 GB/s each way; PCIe Gen5 x16 ~64 GB/s, Gen4 ~32 GB/s.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecosim.errors import EcoSimError


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
    overlap: str | None = None  # "max" or "sum": how memory and compute time combine (see cost.py)
    # Draft-side seconds per speculative step as measured by `validate calibrate` (feed the accepted
    # tokens, expand the tree, select); cost.CostModel.draft_time uses it unless --draft-time is given.
    draft_time_s: float | None = None
    source: str = ""

    def replace(self, **changes: Any) -> Device:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


TB, GB = 1e12, 1e9
TFLOP = 1e12

DEVICES: dict[str, Device] = {
    d.name: d
    for d in [
        Device("h100", 3.35 * TB, 80 * GB, 989 * TFLOP, 1979 * TFLOP, 450 * GB, 64 * GB, source="NVIDIA H100 SXM data sheet"),
        Device("h200", 4.8 * TB, 141 * GB, 989 * TFLOP, 1979 * TFLOP, 450 * GB, 64 * GB, source="NVIDIA H200 SXM data sheet"),
        Device("b200", 8.0 * TB, 180 * GB, 2250 * TFLOP, 4500 * TFLOP, 900 * GB, 64 * GB, source="NVIDIA HGX B200 data sheet"),
        Device("a100", 2.039 * TB, 80 * GB, 312 * TFLOP, 312 * TFLOP, 300 * GB, 32 * GB, source="NVIDIA A100 80GB SXM data sheet (no FP8)"),
        Device("mi300x", 5.3 * TB, 192 * GB, 1307 * TFLOP, 2615 * TFLOP, 448 * GB, 64 * GB, source="AMD Instinct MI300X data sheet"),
    ]
}
_PROFILE_DIR = Path(__file__).parent / "profiles"


def load_profile(path: Path) -> Device:
    """A hardware profile written by `validate calibrate` (JSON with Device's fields)."""
    try:
        data = json.loads(path.read_text())
        fields = {f.name for f in dataclasses.fields(Device)}
        return Device(**{k: v for k, v in data.items() if k in fields})
    except (OSError, ValueError, TypeError) as e:
        raise EcoSimError(f"{path}: not a readable hardware profile ({e})") from None


def get_device(name: str) -> Device:
    """A catalogue device by name, a profile shipped in `profiles/`, or a profile JSON path."""
    if name.lower() in DEVICES:
        return DEVICES[name.lower()]
    shipped = _PROFILE_DIR / f"{name.lower()}.json"
    if shipped.is_file():
        return load_profile(shipped)
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return load_profile(path)
    known = sorted(DEVICES) + sorted(p.stem for p in _PROFILE_DIR.glob("*.json"))
    raise EcoSimError(f"unknown hardware {name!r}; known: {', '.join(known)}, or a profile .json path")
