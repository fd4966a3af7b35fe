"""Unified-memory hosts (Apple M-series, AMD Strix Halo): the GPU and the CPU share one RAM, so experts "in host
memory" cost the bandwidth every other weight costs, no hidden state crosses PCIe, and one pool holds both shares."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import TINY
from ecosim.catalog.devices import get_device
from ecosim.catalog.dtypes import at_dtype
from ecosim.catalog.hosts import Host, load_host
from ecosim.catalog.models import get_model
from ecosim.catalog.serving import ServingProfile
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.placements import Hbm
from ecosim.placements.cpu_moe import CpuMoe


def unified(**kw) -> Host:
    """Round numbers: 100 GB/s (1 channel x 12500 MT/s x 8 B) read at 0.5, CPU 1 TFLOP/s, GPU 10 TFLOP/s, 1 TB."""
    base = dict(name="u", sockets=1, channels=1, mt_s=12500, read_efficiency=0.5, cores=8, gemv_flops=1e12,
                gemm_flops=1e12, ram_bytes=1e12, unified=True, gpu_flops=1e13)
    return Host(**{**base, **kw})


@pytest.mark.parametrize("name, bw, ram", [("m3-ultra-512gb", 819.2e9, 512e9), ("m4-max-128gb", 546.112e9, 128e9),
                                           ("ryzen-ai-max-395-128gb", 256e9, 128e9)])
def test_shipped_unified_hosts_carry_their_sourced_bandwidth_and_memory(name, bw, ram):
    h = load_host(name)
    assert h.unified and h.bandwidth == pytest.approx(bw) and h.ram_bytes == ram
    srcs = dict(h.sources)
    assert all(k in srcs for k in ("channels", "gpu_flops", "ram_bytes", "unified")) and "http" in srcs["channels"]
    assert h.as_device().peak_bf16 == h.gpu_flops and h.as_device().hbm_bw == h.bandwidth


def test_a_host_layer_on_unified_memory_pays_no_pcie_and_the_devices_bandwidth():
    """cpu-moe, 1 token, u = 4 experts of 1e8 B: at 100 GB/s x 0.5 = 8 ms on the host, plus 0.5 ms of sync; the
    same host with its own GPU (not unified) adds the hidden states' round trip 2 x 64 x 2 B over the device's PCIe."""
    model = dataclasses.replace(TINY, expert_bytes=100_000_000)
    engine = ServingProfile(name="e", host_layer_s=5e-4)
    one = CostModel(model, get_device("rtx4090"), CpuMoe(), CostConfig(host=unified(), serving=engine))
    two = CostModel(model, get_device("rtx4090"), CpuMoe(), CostConfig(host=unified(unified=False), serving=engine))
    u, n = np.array([[4, 4, 4]]), np.array([1])
    assert one.layer_times(u, n) == pytest.approx(np.full((1, 3), 4e8 / 50e9 + 5e-4), rel=1e-12)
    assert two.layer_times(u, n) - one.layer_times(u, n) == pytest.approx(np.full((1, 3), 2 * 64 * 2 / 32e9), rel=1e-9)
    # the device is the host itself: its GPU reads the resident experts at the very bandwidth the host's are read at
    assert one.device.hbm_bw == 100e9 and one.device.peak_bf16 == 1e13 and one.device.name == "u"
    assert two.device.name == "rtx4090"


def test_experts_only_prices_a_host_expert_as_a_device_expert():
    """Under experts-only, a routed expert costs e / B wherever it lives: in "host memory" or on the GPU side."""
    model = dataclasses.replace(TINY, expert_bytes=100_000_000)
    cfg = CostConfig(mode="experts-only", host=unified())
    host_side = CostModel(model, get_device("rtx4090"), CpuMoe(), cfg).layer_times(np.array([[4, 4, 4]]), np.array([1]))
    gpu_side = CostModel(model, get_device("rtx4090"), Hbm(), cfg).layer_times(np.array([[4, 4, 4]]), np.array([1]))
    assert host_side == pytest.approx(gpu_side) and host_side[0, 0] == pytest.approx(4e8 / 100e9)


def test_one_memory_holds_both_shares():
    """Qwen3-235B-A22B: BF16 (about 470 GB) cannot fit a 512 GB M3 Ultra's 384 GB usable under cpu-moe even though
    its GPU share and host share each would; at Q4_K_M (about 140 GB) it fits."""
    m3 = load_host("m3-ultra-512gb")
    shape = get_model("qwen3-235b-a22b")
    with pytest.raises(EcoSimError, match="host RAM"):
        CostModel(shape, get_device("h200"), CpuMoe(8), CostConfig(host=m3)).check(1024)
    CostModel(at_dtype(shape, "q4_k_m"), get_device("h200"), CpuMoe(8), CostConfig(host=m3)).check(1024)
