"""Option values checked against the declarations of what they override (ecosim/gate): `--bw 3300000GB/s` is
refused as a hardware profile's `hbm_bw` of 3.3e15 would be, naming what is allowed."""

from __future__ import annotations

from ecosim.catalog.devices import Device
from ecosim.gate.core import check_value
from ecosim.gate.profiles import HardwareSpec


def checked_overrides(device: Device, given: dict[str, tuple[str | None, str]]) -> Device:
    """The device, once every overridden field (flag: (text typed, field)) is within its declared range."""
    for flag, (text, name) in given.items():
        if text:
            check_value(HardwareSpec, name, getattr(device, name), f"{flag} {text}")
    return device
