"""Serving profiles: how an inference engine spends a batch-1 step beyond the bytes it reads.

A profile is a JSON data file (shipped ones in data/serving/, or a user's own via `--profile FILE`)
whose fields are the free constants of the step model in ecosim/cost/; every field carries units in its
name and a source in the file's `sources`. `validate calibrate` writes the same fields into the
hardware profiles it measures, so a calibrated CPU profile carries its own terms.

Precedence, one rule everywhere: an explicit CLI value > the profile's value > the field default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecosim.errors import EcoSimError

DATA = Path(__file__).parent / "data" / "serving"


@dataclass(frozen=True)
class ServingProfile:
    """The step model's free constants (see ecosim/cost/ for the equation they enter)."""

    name: str = "none"
    step_fixed_s: float = 0.0  # s per verification step: sampling, scheduling, graph launch, LM-head argmax
    kernel_latency_s: float = 0.0  # s per kernel on a layer's critical path (model's kernels_per_layer)
    # Kernels per decoder layer an engine release launches beyond the fused count of ModelShape.kernels_per_layer
    # (unfused elementwise chains, a router top-k in many small ops, expert-parallel reorders), counted or estimated
    # from that release's source (a published row's notes say which); 0 for a current engine, whose count
    # kernels_per_layer is.
    extra_layer_kernels: float = 0.0
    # s per such extra kernel: they are tiny elementwise kernels (quantisation chains, rope, copies, sorts), cheaper
    # than kernel_latency_s, which is fitted over the fused kernels, GEMMs included.
    extra_kernel_s: float = 0.0
    collective_latency_s: float = 0.0  # s per all-reduce or all-to-all round, before its bytes over the link
    bw_efficiency: float = 1.0  # achieved fraction of peak HBM bandwidth
    compute_efficiency: float = 1.0  # achieved fraction of dense peak FLOP/s in a full GEMM tile
    gemm_tile_rows: float = 0.0  # rows (tokens per expert) of a grouped-GEMM tile; 0: no tile quantisation
    overlap: str = "max"  # "max": memory and compute overlap (GPU roofline); "sum": they add (CPU)
    memory_fraction: float = 0.9  # fraction of device memory for weights + KV (engine's static pool)
    # A speculative step beyond its draft forwards (drafts.py) and the target's verify forward:
    spec_step_kernels: float = 0.0  # kernels per speculative step: tree mask/positions, target argmax, accept walk, KV compaction
    spec_level_kernels: float = 0.0  # kernels per draft level beyond its forward: top-k of the draft logits, score/parent select
    spec_level_s: float = 0.0  # s per draft level beyond its forward and counted kernels (the draft loop's per-level latency)
    spec_sync_s: float = 0.0  # s of host work per speculative step its device->host sync (accept lengths) exposes
    spec_overlap: bool = True  # the engine overlaps that host work with the device (SGLang spec v2): spec_sync_s hidden
    # Experts in host memory (placements cpu-moe[:N] and cpu; catalog/hosts.py): what the engine adds per CPU MoE
    # layer (handing the hidden states to the CPU threads and waiting for them), and the fractions of the host's
    # scattered-read bandwidth and small-GEMM throughput its expert kernels reach (1: the host file's own figures).
    host_layer_s: float = 0.0
    host_read_efficiency: float = 1.0
    host_gemm_efficiency: float = 1.0
    source: str = ""
    sources: tuple[tuple[str, str], ...] = ()  # (field, where its value comes from)
    fitted_on: tuple[str, ...] = ()  # published rows (ids) the fitted fields were fitted on

    def replace(self, **changes: Any) -> ServingProfile:
        """A copy with every non-None change applied (None means: not given, keep the profile's)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["sources"] = dict(self.sources)
        d["fitted_on"] = list(self.fitted_on)
        for k, default in HOST_DEFAULTS.items():  # absent at their defaults: a GPU profile's sweep ids stay as they were
            if d[k] == default:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: ServingProfile | None = None) -> ServingProfile:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        if isinstance(kw.get("sources"), dict):
            kw["sources"] = tuple(sorted((str(k), str(v)) for k, v in kw["sources"].items()))
        if "fitted_on" in kw:
            kw["fitted_on"] = tuple(kw["fitted_on"])
        if "draft_step_fixed_s" in data and "spec_sync_s" not in data:  # a profile written before the spec_* fields
            kw.update(spec_sync_s=data["draft_step_fixed_s"], spec_overlap=False)
        prof = dataclasses.replace(base or cls(), **kw)
        if not isinstance(prof.spec_overlap, bool):
            raise EcoSimError(f"serving profile {prof.name}: spec_overlap must be true or false")
        if prof.overlap not in ("max", "sum"):
            raise EcoSimError(f"serving profile {prof.name}: overlap must be max or sum, got {prof.overlap!r}")
        bad = [f.name for f in dataclasses.fields(cls) if f.type == "float" and not getattr(prof, f.name) >= 0]
        bad += [k for k in ("host_read_efficiency", "host_gemm_efficiency") if not 0 < getattr(prof, k) <= 1]
        if bad:
            raise EcoSimError(f"serving profile {prof.name}: {', '.join(bad)} must be non-negative numbers (host_*_efficiency in (0, 1])")
        return prof


HOST_DEFAULTS = {"host_layer_s": 0.0, "host_read_efficiency": 1.0, "host_gemm_efficiency": 1.0}


def shipped() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))


def load_serving(name_or_path: str | Path, _seen: tuple[str, ...] = ()) -> ServingProfile:
    """A shipped serving profile by name (cuda-graphs, eager) or a JSON file of the same fields.

    A file may name `"base"` (a shipped profile or another file): it then holds only what it changes,
    e.g. `{"base": "cuda-graphs", "extra_layer_kernels": 63}` for an engine release that launched 63
    more kernels per layer than today's, and every field it does not name is the base's."""
    path = DATA / f"{str(name_or_path).lower()}.json"
    if not path.is_file():
        path = Path(name_or_path)
    if not path.is_file():
        raise EcoSimError(f"unknown serving profile {str(name_or_path)!r}; shipped: {', '.join(shipped())}, or a .json path")
    from ecosim import gate
    from ecosim.gate.profiles import HARDWARE, SERVING

    data = gate.read_json(path, "a serving profile")
    if not isinstance(data, dict):
        raise EcoSimError(f"{path}: a serving profile is a JSON object of ServingProfile fields")
    # The gate: every field's type and range, and a misspelled field named with the ones allowed.
    hardware = "hbm_bw" in data or "calibration" in data
    gate.check(HARDWARE if hardware else SERVING, data, path, () if hardware else {f.name for f in dataclasses.fields(ServingProfile)})
    if isinstance(data.get("serving"), dict):  # a hardware profile carrying its own terms
        data = data["serving"]
    elif "calibration" in data:  # a calibrated hardware profile written before profiles carried serving terms
        data = {"name": data.get("name", path.stem), "step_fixed_s": data.get("step_overhead_s") or 0.0,
                "overlap": data.get("overlap") or "sum", "source": data.get("source", "")}
    data.setdefault("name", path.stem)
    base = None
    if "base" in data:
        if not isinstance(data["base"], str) or str(path) in _seen:
            raise EcoSimError(f"{path}: base must name another serving profile (a shipped name or a .json path), not itself")
        base = load_serving(data["base"], (*_seen, str(path)))
        if isinstance(data.get("sources"), dict):  # the base's sources stand for the fields this file leaves alone
            data["sources"] = {**dict(base.sources), **data["sources"]}
    try:
        return ServingProfile.from_dict(data, base)
    except TypeError as e:
        raise EcoSimError(f"{path}: not a serving profile ({e})") from None


DEFAULT_SERVING = "cuda-graphs"
# What a measured hardware profile means when it names no serving terms: only what it measured
# (calibrated step overhead, efficiencies 1, no per-layer or collective terms).
MEASURED = ServingProfile(name="measured", source="terms a `validate calibrate` profile did not measure are zero")
