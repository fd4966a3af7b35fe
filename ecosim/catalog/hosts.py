"""Host machines as the cost model sees them: the CPU and RAM that hold and compute routed experts under
`cpu-moe[:N]` (llama.cpp `--cpu-moe` / `--n-cpu-moe N`, ik_llama.cpp, KTransformers) and the whole model
under `cpu`.

Each host is a JSON file in data/hosts/ (or a user's own, `--host FILE`), every value with its source in
`sources`. Memory bandwidth is sockets x channels x MT/s x 8 bytes (a DDR5 channel moves 64 bits per
transfer) unless the file gives a measured `mem_bw`. A step's routed experts are read at

    B_host * eta_read                 eta_read: achieved fraction for scattered expert reads

and their arithmetic runs at `gemv_flops` for one token (the matrix-vector path) or at
`gemm_flops * min(1, m / gemm_rows)` for several (the small-GEMM path, m tokens per expert of the layer; a
tile of gemm_rows rows costs the same whatever the tokens in it; gemm_rows 0: no tile). A profile written by
`validate calibrate` is read as a host too (its measured bandwidth, peak, overlap and step overhead), so
the machine held to 3% on real hardware is priced by the same `cpu` placement as a catalogue server.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecosim.catalog.devices import Device
from ecosim.catalog.serving import MEASURED
from ecosim.errors import EcoSimError

DATA = Path(__file__).parent / "data" / "hosts"
CHANNEL_BYTES = 8  # a DDR4/DDR5 channel: 64 data bits per transfer


@dataclass(frozen=True)
class Host:
    """One host: its memory, its cores' throughput, its RAM (see the module docstring for the terms)."""

    name: str
    sockets: int
    channels: int  # memory channels per socket
    mt_s: float  # mega-transfers per second of each channel (DDR5-4800: 4800)
    read_efficiency: float  # eta_read: achieved fraction of mem_bw for scattered expert reads
    cores: int  # physical cores over all sockets
    gemv_flops: float  # FLOP/s over all cores, matrix-vector (one token) on the host's weights
    gemm_flops: float  # FLOP/s over all cores in the small-GEMM path (several tokens per weight read)
    ram_bytes: float
    gemm_rows: float = 0.0  # rows of a GEMM tile; 0: no tile quantisation
    mem_bw: float | None = None  # bytes/s measured; None: sockets x channels x MT/s x 8
    memory_fraction: float = 0.9  # RAM usable for weights and KV (the OS, buffers and the engine keep the rest)
    overlap: str = "max"  # how memory and compute combine on the host: max (overlapped) or sum
    step_overhead_s: float | None = None  # measured hosts (validate calibrate): fixed time per step
    draft_time_s: float | None = None  # measured hosts: draft seconds per speculative step
    # Unified memory (Apple M-series, AMD Strix Halo): the GPU and the CPU share this RAM, so the host is its own
    # device (as_device: the integrated GPU at gpu_flops over the same bandwidth), experts "in host memory" cost the
    # bandwidth every other weight costs, no hidden state crosses PCIe, and one pool holds both sides' shares.
    unified: bool = False
    gpu_flops: float | None = None  # FLOP/s, the integrated GPU's dense FP16 peak (unified hosts)
    source: str = ""
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes/s (B_host)."""
        return self.mem_bw if self.mem_bw is not None else self.sockets * self.channels * self.mt_s * 1e6 * CHANNEL_BYTES

    @property
    def measured(self) -> bool:
        return self.step_overhead_s is not None

    def flops(self, tokens: Any, per_expert: Any = None) -> Any:
        """FLOP/s for `tokens` tokens (array or number): gemv for one, gemm x min(1, m / gemm_rows) for more."""
        import numpy as np

        n = np.asarray(tokens, dtype=np.float64)
        m = n if per_expert is None else np.asarray(per_expert, dtype=np.float64)
        tile = np.minimum(1.0, m / self.gemm_rows) if self.gemm_rows > 0 else 1.0
        return np.where(n <= 1, self.gemv_flops, self.gemm_flops * np.maximum(tile, 1e-9))

    def as_device(self) -> Device:
        """The host as the one device of the `cpu` placement: dense weights and KV read from RAM at
        B_host eta_read, dense arithmetic at the matrix-vector rate, its measured terms where it has them. A unified
        host is the device of every placement, its arithmetic the integrated GPU's (gpu_flops)."""
        peak = self.gpu_flops if self.unified and self.gpu_flops else self.gemv_flops
        return Device(
            name=self.name, hbm_bw=self.bandwidth, hbm_bytes=self.ram_bytes, peak_bf16=peak,
            peak_fp8=peak, link_bw=self.bandwidth, pcie_bw=self.bandwidth,
            step_overhead_s=self.step_overhead_s, bw_efficiency=self.read_efficiency, compute_efficiency=1.0,
            overlap=self.overlap, draft_time_s=self.draft_time_s, serving=MEASURED if self.measured else None,
            source=self.source,
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["sources"] = dict(self.sources)
        d["bandwidth"] = self.bandwidth
        return d


def from_calibration(data: dict[str, Any], name: str) -> Host:
    """A `validate calibrate` profile read as a host: its fitted bandwidth and peak (one rate for one token and
    for several: the fit has one), overlap, step overhead and draft time; efficiencies 1 (already in the fit)."""
    bw, peak = float(data["hbm_bw"]), float(data["peak_bf16"])
    src = data.get("source", "validate calibrate")
    threads = ((data.get("calibration") or {}).get("environment") or {}).get("threads", 1)
    return Host(name=data.get("name", name), sockets=1, channels=1, mt_s=0.0, read_efficiency=float(data.get("bw_efficiency") or 1.0),
                cores=int(threads), gemv_flops=peak * float(data.get("compute_efficiency") or 1.0),
                gemm_flops=peak * float(data.get("compute_efficiency") or 1.0), ram_bytes=float(data.get("hbm_bytes", 0.0)),
                mem_bw=bw, memory_fraction=1.0, overlap=data.get("overlap") or "sum",
                step_overhead_s=float(data.get("step_overhead_s") or 0.0), draft_time_s=data.get("draft_time_s"),
                source=f"{src} (read as a host)",
                sources=(("mem_bw", "fitted by validate calibrate"), ("gemv_flops", "fitted by validate calibrate (one peak)")))


def _host(data: dict[str, Any], name: str) -> Host:
    if "calibration" in data and "hbm_bw" in data:
        return from_calibration(data, name)
    if "host" in data and isinstance(data["host"], dict):  # a file that wraps its host (validate calibrate --host-out)
        data = data["host"]
    fields = {f.name for f in dataclasses.fields(Host)}
    kw = {k: v for k, v in data.items() if k in fields}
    kw.setdefault("name", name)
    if isinstance(kw.get("sources"), dict):
        kw["sources"] = tuple(sorted((str(k), str(v)) for k, v in kw["sources"].items()))
    host = Host(**kw)
    numbers = ("sockets", "channels", "mt_s", "read_efficiency", "cores", "gemv_flops", "gemm_flops", "ram_bytes", "gemm_rows")
    bad = [f for f in numbers if not isinstance(getattr(host, f), (int, float)) or getattr(host, f) < 0]
    if bad or host.bandwidth <= 0 or host.gemv_flops <= 0 or host.gemm_flops <= 0 or not 0 < host.read_efficiency <= 1:
        raise EcoSimError(f"host {host.name}: needs a positive bandwidth (channels x MT/s or mem_bw), gemv_flops and "
                          f"gemm_flops, read_efficiency in (0, 1], non-negative {', '.join(numbers)}")
    if host.overlap not in ("max", "sum"):
        raise EcoSimError(f"host {host.name}: overlap must be max or sum, got {host.overlap!r}")
    if not isinstance(host.unified, bool) or not (host.gpu_flops is None or (isinstance(host.gpu_flops, (int, float)) and host.gpu_flops > 0)):
        raise EcoSimError(f"host {host.name}: unified must be true or false and gpu_flops a positive FLOP/s")
    return host


def load_host(name_or_path: str | Path) -> Host:
    """A catalogue host by name, or a host JSON file (a `validate calibrate` profile too)."""
    key = str(name_or_path).lower()
    path = DATA / f"{key}.json"
    if not path.is_file():
        path = Path(name_or_path)
    if not path.is_file():
        raise EcoSimError(f"unknown host {str(name_or_path)!r}; known: {', '.join(shipped())}, or a host .json path")
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return _host(data, path.stem)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise EcoSimError(f"{path}: not a readable host file ({e})") from None


def shipped() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))


__all__ = ["Host", "load_host", "shipped", "from_calibration"]
