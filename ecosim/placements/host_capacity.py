"""Capacity of the placements that keep routed experts in host RAM (cpu-moe[:N], cpu): what the GPU and the
host each hold, and the one-line refusal that names what would fit.

    host RAM:  h E e  (+ everything else under cpu)          h: MoE layers on the host, E experts, e bytes each
    GPU:       (L_moe - h) E e + W_dense + c kappa            under cpu-moe[:N]
    unified memory (Host.unified): both in the host's one RAM
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.dtypes import GGUF, at_dtype, bits
from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError

if TYPE_CHECKING:
    from ecosim.catalog.hosts import Host


def need_host(placement: object, host: Host | None) -> Host:
    """The host of a placement that needs one, or a one-line error naming how to give it."""
    if host is None:
        from ecosim.catalog.hosts import shipped

        raise EcoSimError(f"placement {placement} keeps experts in host RAM: give --host (one of {', '.join(shipped())}, "
                          f"or a host .json)")
    return host


def layer_mask(model: ModelShape, first_blocks: int | None) -> np.ndarray:
    """(MoE layers,) bool: the MoE layers among the first `first_blocks` decoder blocks (llama.cpp --n-cpu-moe N
    keeps the expert tensors of blocks 0..N-1 on the CPU; dense blocks have none); None: every MoE layer."""
    layers = np.asarray(model.moe_layers)
    return np.ones(len(layers), bool) if first_blocks is None else layers < first_blocks


def split(model: ModelShape, on_host: int, context_tokens: int) -> tuple[float, float]:
    """(GPU bytes, host bytes) with the routed experts of `on_host` MoE layers in RAM."""
    layer = model.num_experts * model.expert_bytes
    gpu = (model.num_moe_layers - on_host) * layer + model.dense_bytes + context_tokens * model.kv_bytes_per_token
    return gpu, on_host * layer


def _fits_cpu_moe(model: ModelShape, device: Device, host: Host, ctx: int, fraction: float) -> list[int]:
    """The counts h of host MoE layers with which both sides fit."""
    vram, ram = device.hbm_bytes * fraction, host.ram_bytes * host.memory_fraction
    return [h for h in range(model.num_moe_layers + 1) if all(np.less_equal(split(model, h, ctx), (vram, ram)))]


def _blocks(model: ModelShape, h: int) -> int:
    """The --n-cpu-moe N that puts exactly the first h MoE layers on the host."""
    return 0 if h == 0 else int(model.moe_layers[h - 1]) + 1


def what_fits_host(model: ModelShape, device: Device | None, host: Host, ctx: int, fraction: float) -> str:
    """One phrase: the cpu-moe:N that fit this GPU and host, else the GGUF types at which cpu-moe (or cpu) fits,
    else the RAM it would need."""
    if device is not None:
        hs = _fits_cpu_moe(model, device, host, ctx, fraction)
        if hs:
            lo, hi = _blocks(model, hs[0]), _blocks(model, hs[-1])
            return f"would fit: cpu-moe:{lo}" + (f" to cpu-moe:{hi}" if hi != lo else "") + " (--n-cpu-moe)"
    smaller = []
    for dtype in sorted(GGUF, key=bits, reverse=True):
        if bits(dtype) / 8 >= model.bytes_per_param:
            continue
        shape = at_dtype(model, dtype)
        ok = _fits_cpu_moe(shape, device, host, ctx, fraction) if device is not None else \
            sum(split(shape, shape.num_moe_layers, ctx)) <= host.ram_bytes * host.memory_fraction
        if ok:
            smaller.append(dtype)
    total = sum(split(model, model.num_moe_layers, ctx)) if device is None else split(model, model.num_moe_layers, ctx)[1]
    need = f"a host with {total / host.memory_fraction / 1e9:.0f} GB of RAM"
    return f"would fit: --dtype {' or '.join(smaller[:3])}, or {need}" if smaller else f"nothing fits at any GGUF type; needs {need}"


def check_cpu_moe(placement: object, model: ModelShape, device: Device, host: Host | None, mask: np.ndarray,
                  ctx: int, fraction: float) -> None:
    """Refuse cpu-moe[:N] when the host's RAM or the GPU's memory cannot hold its share."""
    host = need_host(placement, host)
    h = int(mask.sum())
    gpu, ram = split(model, h, ctx)
    if host.unified:  # one memory holds both shares (the device is the host: Host.as_device)
        gpu, ram = 0.0, gpu + ram
    vram_ok, ram_ok = gpu <= device.hbm_bytes * fraction, ram <= host.ram_bytes * host.memory_fraction
    if vram_ok and ram_ok:
        return
    if not ram_ok:
        what = (f"{ram / 1e9:.1f} GB of host RAM for the routed experts of {h} MoE layers but {host.name} holds "
                f"{host.ram_bytes * host.memory_fraction / 1e9:.1f} GB ({host.memory_fraction:.0%} of {host.ram_bytes / 1e9:.0f} GB)")
    else:
        what = (f"{gpu / 1e9:.1f} GB on {device.name} (dense {model.dense_bytes / 1e9:.1f} GB, experts of "
                f"{model.num_moe_layers - h} MoE layers, KV for {ctx} tokens) but it holds {device.hbm_bytes * fraction / 1e9:.1f} GB")
    raise EcoSimError(f"{model.name} under {placement} needs {what}; {what_fits_host(model, device, host, ctx, fraction)}")


def check_cpu(placement: object, model: ModelShape, host: Host | None, ctx: int) -> None:
    """Refuse cpu when the whole model and its KV do not fit the host's RAM."""
    host = need_host(placement, host)
    total = sum(split(model, model.num_moe_layers, ctx))
    usable = host.ram_bytes * host.memory_fraction
    if host.ram_bytes <= 0 or total <= usable:
        return
    raise EcoSimError(f"{model.name} under {placement} needs {total / 1e9:.1f} GB of host RAM (weights and KV for {ctx} "
                      f"tokens) but {host.name} holds {usable / 1e9:.1f} GB; {what_fits_host(model, None, host, ctx, 1.0)}")
