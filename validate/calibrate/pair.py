"""Calibrating a loaded pair on its device: the bench, the design, the fit and the device's facts.

Used by `validate calibrate` and, interleaved with decoding, by `validate run`. Needs torch.
"""

from __future__ import annotations

import platform
from typing import Any

import numpy as np
import torch

from ecosim.trace.io import Trace
from tracer.pair import Pair
from validate.bench import ModelBench
from validate.calibrate.config import CalibConfig
from validate.calibrate.design import Case, grid_design, trace_design
from validate.calibrate.fit import fit
from validate.calibrate.host import cpu_name, memory_bytes
from validate.calibrate.profile import profile
from validate.calibrate.timing import Samples, measure
from validate.clock import Clock, WallClock
from validate.recorded import trace_text


def environment(pair: Pair, clock: str) -> dict[str, Any]:
    """The device, threads, library versions, dtype and clock a measurement was made with."""
    import transformers

    dev = pair.target.device
    return {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name(),
        "device_kind": dev.type, "threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "dtype": str(pair.target.dtype).removeprefix("torch."),
        "experts_implementation": getattr(pair.target.model.config, "_experts_implementation", None),
        "clock": clock,
    }


def pcie_bw(dev: torch.device) -> float | None:
    """Host -> device copy bandwidth of a pinned 256 MiB buffer (CUDA only)."""
    if dev.type != "cuda":
        return None
    src = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    dst = torch.empty_like(src, device=dev)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(dev)
    clock = WallClock(dev)
    t0 = clock.now()
    for _ in range(5):
        dst.copy_(src, non_blocking=True)
    return 5 * src.numel() / (clock.now() - t0)


def design_for(cfg: CalibConfig, pair: Pair, trace: Trace | None) -> list[Case]:
    """The verify cases: subtrees of the trace's trees when there is a trace, else the grid."""
    rng = np.random.default_rng(cfg.seed)
    return trace_design(trace, cfg, rng) if trace is not None else grid_design(cfg, pair.shape, rng)


def bench_for(pair: Pair, cfg: CalibConfig, text: list[int] | None) -> ModelBench:
    """The pair's microbenchmarks with `cfg`'s tree and budget, contexts cut from `text`."""
    return ModelBench(pair, cfg.depth, cfg.topk, cfg.max_nodes, cfg.budget, cfg.seed, text)


def calibrate_pair(pair: Pair, cfg: CalibConfig, clock: Clock, clock_kind: str = "wall", progress: Any = None,
                   text: list[int] | None = None, trace: Trace | None = None) -> dict[str, Any]:
    """Measure and fit `pair` on its device; the profile's JSON object. `trace`: verify cases are
    subtrees of its trees with their routing (calibrate.trace_design), else a grid; `text`: a token
    stream the contexts and draft roots are cut from (default: the trace's, else random tokens)."""
    if text is None and trace is not None:
        text = trace_text(trace)
    bench = bench_for(pair, cfg, text)
    try:
        samples = measure(bench, clock, cfg, design_for(cfg, pair, trace), progress)
    finally:
        bench.close()
    return profile_of(pair, cfg, samples, clock_kind)


def profile_of(pair: Pair, cfg: CalibConfig, samples: Samples, clock_kind: str) -> dict[str, Any]:
    """Fit `samples` and describe the device: the profile's JSON object."""
    result = fit(samples, pair.shape, cfg.overlap)
    env = environment(pair, clock_kind)
    dev = pair.target.device
    if dev.type == "cuda":
        mem = float(torch.cuda.get_device_properties(dev).total_memory)
        pcie = pcie_bw(dev)
        unmeasured = ["link_bw (one device: set to the host-to-device bandwidth)"]
        name = f"calibrated-cuda ({env['device']})"
    else:
        mem, pcie = memory_bytes(), None
        unmeasured = ["link_bw and pcie_bw (a CPU has neither: set to the fitted bandwidth)"]
        name = f"calibrated-cpu ({env['threads']} thread{'s' if env['threads'] != 1 else ''})"
    source = (f"validate calibrate on {env['device']}, {env['threads']} torch threads, {clock_kind} clock, model "
              f"{pair.shape.name} ({env['dtype']}); fitted, not a data sheet")
    info = {"name": name, "memory_bytes": mem, "link_bw": pcie, "pcie_bw": pcie, "source": source,
            "environment": env, "unmeasured": unmeasured}
    return profile(result, cfg, samples, pair.shape, info)
