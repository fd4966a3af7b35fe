"""Option values checked against the declarations of what they override (ecosim/gate): `--bw 3300000GB/s` is
refused as a hardware profile's `hbm_bw` of 3.3e15 would be, naming what is allowed."""

from __future__ import annotations

from ecosim.catalog.devices import Device
from ecosim.errors import EcoSimError
from ecosim.gate.core import check_value
from ecosim.gate.profiles import HardwareSpec


def checked_overrides(device: Device, given: dict[str, tuple[str | None, str]]) -> Device:
    """The device, once every overridden field (flag: (text typed, field)) is within its declared range."""
    for flag, (text, name) in given.items():
        if text:
            check_value(HardwareSpec, name, getattr(device, name), f"{flag} {text}")
    return device


def physical_memory() -> float:
    """Bytes of this machine's memory (inf where the platform does not say)."""
    import os

    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


# Working memory of generating one node row, as a multiple of its size on disk: the generator's per-level
# candidate arrays (topk children of every frontier node) and the sort that keeps the best max_nodes.
SYNTH_WORKING_SET = 16


def check_synth_size(requests: int, positions: int, max_nodes: int, width: int, gates: bool) -> None:
    """Refuse up front a synthetic trace larger than this machine could hold while generating it
    (`synth --positions 2000000000` would otherwise die in an allocation after minutes)."""
    rows = requests * positions * (max_nodes + 1)
    row = 30 + 2 * width + (4 * width if gates else 0)  # the node columns of TRACE_FORMAT.md, in bytes
    need, have = rows * row * SYNTH_WORKING_SET, physical_memory()
    if rows > 2**31 - 1 or need > have:
        raise EcoSimError(f"--requests {requests} x --positions {positions} x (--max-nodes {max_nodes} + 1) = {rows:,} node rows "
                          f"need about {need / 1e9:,.0f} GB to generate; this machine has {have / 1e9:,.0f} GB (allowed: fewer "
                          f"rows; at most {min(2**31 - 1, int(have // (row * SYNTH_WORKING_SET))):,})")
