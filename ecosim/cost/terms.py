"""How a step is priced: the options that choose it (`CostConfig`, each a CLI flag) and the
constants a priced step uses, resolved once from the options, the hardware profile and the serving
profile by one rule, explicit CLI > profile > default (`Terms`). The step's equation is in
ecosim/cost/__init__.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

from ecosim.catalog.devices import Device
from ecosim.catalog.dtypes import BITS
from ecosim.catalog.hosts import Host, load_host
from ecosim.catalog.hosts import shipped as shipped_hosts
from ecosim.catalog.serving import DEFAULT_SERVING, HOST_DEFAULTS, MEASURED, ServingProfile, load_serving, shipped
from ecosim.options import choice, duration, fraction, option

ACT_BYTES = 2  # BF16 activations crossing the link


@dataclass(frozen=True)
class CostConfig:
    """How a step is priced. Each field is a CLI option of the commands that price steps (replay,
    sweep, tune, predictor compare; its flag, help and parser in the metadata, ecosim/options.py).
    None means "not given": the hardware profile's measured value, else the serving profile's, applies
    (`Terms`); one rule for every field: explicit CLI > profile > default."""

    mode: Literal["full", "experts-only"] = field(default="full", metadata=option(
        "--cost", "full: the whole step; experts-only: only routed-expert bytes at raw bandwidth (checkable by hand). "
        "Default: full.", choice("full", "experts-only")))
    serving: ServingProfile | None = field(default=None, metadata=option(
        "--profile", f"Serving profile: {', '.join(shipped())}, or a .json of its fields (a `validate calibrate` profile too); "
        "default: the hardware profile's own terms, else cuda-graphs.", load_serving))
    bw_efficiency: float | None = field(default=None, metadata=option(
        "--bw-efficiency", "Achieved fraction of peak HBM bandwidth, in [0.01, 1]; default: the serving profile's "
        "(ignored under experts-only).", fraction))
    compute_efficiency: float | None = field(default=None, metadata=option(
        "--compute-efficiency", "Achieved fraction of peak FLOP/s, in [0.01, 1]; default: the serving profile's.", fraction))
    step_overhead_s: float | None = field(default=None, metadata=option(
        "--step-overhead", "Fixed time per verification step (sampling, scheduling), a time with its unit, e.g. 30us; "
        "default: the serving profile's.", duration))
    draft_time_s: float | None = field(default=None, metadata=option(  # per speculative step
        "--draft-time", "Draft time per speculative step, a time with its unit, e.g. 1.5ms, whatever its steps; default: the "
        "steps it drafts x one draft forward, plus their bookkeeping (drafts.py).", duration))
    link_latency_s: float | None = field(default=None, metadata=option(  # per collective
        "--link-latency", "Latency per collective (all-reduce or all-to-all round), a time with its unit, e.g. 5us; "
        "default: the serving profile's.", duration))
    overlap: Literal["max", "sum"] | None = field(default=None, metadata=option(
        "--overlap", "How memory and compute time combine: max (they overlap: GPUs) or sum (CPUs); default: the "
        "hardware or serving profile's.", choice("max", "sum")))
    host: Host | None = field(default=None, metadata=option(
        "--host", "Host machine whose RAM and CPU hold the routed experts under --placement cpu-moe[:N] or the whole "
        f"model under cpu: a catalogue host ({', '.join(shipped_hosts())}) "
        "or a host .json (a `validate calibrate` profile too); default: none.", load_host))
    dtype: str | None = field(default=None, metadata=option(
        "--dtype", "Weights stored as this type (bits per weight, block scales included): bf16, fp8, int8, mxfp4, nvfp4 "
        "or a GGUF type (q8_0, q6_k, q5_k_m, q4_k_m, q4_k, q4_0, iq4_xs, q3_k, q2_k, iq2_xxs, ...); default: the "
        "model's own.", choice(*BITS)))


def cost_doc(config: CostConfig) -> dict[str, Any]:
    """The config as a sweep id hashes it: the host-memory fields (--host, --dtype) only where given, so the ids of
    every sweep priced without them stay as they were."""
    doc = asdict(config)
    for k in ("host", "dtype"):
        if doc[k] is None:
            del doc[k]
    if isinstance(doc.get("serving"), dict):  # a profile's host terms likewise, at their defaults
        for k, default in HOST_DEFAULTS.items():
            if doc["serving"].get(k) == default:
                del doc["serving"][k]
    return doc


@lru_cache(maxsize=None)
def _default_serving() -> ServingProfile:
    return load_serving(DEFAULT_SERVING)


def _first(*values: Any) -> Any:
    """The first value that was given (not None): explicit CLI > profile > default."""
    return next(v for v in values if v is not None)


@dataclass(frozen=True)
class Terms:
    """Every constant a priced step used, resolved once (printed by replay's footer and --json)."""

    serving: str
    step_fixed_s: float
    kernel_latency_s: float
    extra_layer_kernels: float
    extra_kernel_s: float
    collective_latency_s: float
    bw_efficiency: float
    compute_efficiency: float
    gemm_tile_rows: float
    overlap: str
    memory_fraction: float
    spec_step_kernels: float
    spec_level_kernels: float
    spec_level_s: float
    spec_sync_s: float
    spec_overlap: bool
    draft_time_s: float | None

    @staticmethod
    def profile(config: CostConfig, device: Device) -> ServingProfile:
        """The serving profile in force: --profile, else the device's own, else (a measured device, which
        claims nothing it did not measure) MEASURED, else the default."""
        return config.serving or device.serving or (MEASURED if device.step_overhead_s is not None else _default_serving())

    @classmethod
    def resolve(cls, config: CostConfig, device: Device) -> Terms:
        s = cls.profile(config, device)
        return cls(
            serving=s.name,
            step_fixed_s=_first(config.step_overhead_s, device.step_overhead_s, s.step_fixed_s),
            kernel_latency_s=s.kernel_latency_s,
            extra_layer_kernels=s.extra_layer_kernels,
            extra_kernel_s=s.extra_kernel_s,
            collective_latency_s=_first(config.link_latency_s, s.collective_latency_s),
            bw_efficiency=_first(config.bw_efficiency, device.bw_efficiency, s.bw_efficiency),
            compute_efficiency=_first(config.compute_efficiency, device.compute_efficiency, s.compute_efficiency),
            gemm_tile_rows=s.gemm_tile_rows,
            overlap=_first(config.overlap, device.overlap, s.overlap),
            memory_fraction=s.memory_fraction,
            spec_step_kernels=s.spec_step_kernels,
            spec_level_kernels=s.spec_level_kernels,
            spec_level_s=s.spec_level_s,
            spec_sync_s=s.spec_sync_s,
            spec_overlap=s.spec_overlap,
            draft_time_s=config.draft_time_s if config.draft_time_s is not None else device.draft_time_s,
        )
