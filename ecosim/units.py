"""Strict parsing of physical quantities given on the command line.

`3.3TB/s`, `4.8 TB/s`, `900GB/s`, `64GiB/s`, `141GB`, `44MB`, `25us`, `989TFLOP/s`.
Decimal prefixes (k, M, G, T, P) are powers of 1000, binary ones (Ki, Mi, Gi, Ti, Pi) powers of 1024.
`B` is a byte and `b` a bit. Anything else (no unit, wrong dimension, negative, zero where it makes
no sense) raises `UnitError` with one line that says what was expected.

Parsing is exact: the number and its unit's scale are multiplied as decimals and rounded to a float
once, so `30us` is the float nearest to 30e-6 (the literal `30e-6`), not `30.0 * 1e-6`
(2.9999999999999997e-05), and a value typed on the command line equals the same value typed in Python.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from typing import Literal

from ecosim.errors import EcoSimError

Dimension = Literal["bytes", "bandwidth", "time", "flops"]

# Scales as exact decimals (parsing); `_DECIMAL` is also read as floats by format_quantity.
_DECIMAL = {"": Decimal(1), "k": Decimal("1e3"), "K": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
            "T": Decimal("1e12"), "P": Decimal("1e15")}
_BINARY = {"Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50)}
_TIME = {"s": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "ns": Decimal("1e-9"),
         "min": Decimal(60)}
_EXAMPLES = {
    "bytes": "e.g. 141GB, 44MB, 64GiB",
    "bandwidth": "e.g. 3.3TB/s, 900GB/s, 64GiB/s",
    "time": "e.g. 25us, 1.5ms, 2s",
    "flops": "e.g. 989TFLOP/s, 2.25PFLOP/s",
}
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*(\S*?)\s*$")
_PREFIXED = re.compile(r"^(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|)(B|b|FLOP|FLOPs|FLOPS)(/s)?$")


class UnitError(EcoSimError, ValueError):
    """A quantity that does not parse, or does not have the dimension asked for."""


def _dimension_and_scale(unit: str) -> tuple[Dimension, Decimal] | None:
    if unit in _TIME:
        return "time", _TIME[unit]
    m = _PREFIXED.match(unit)
    if not m:
        return None
    prefix, base, per_second = m.groups()
    scale = _BINARY.get(prefix) or _DECIMAL[prefix]
    if base in ("B", "b"):
        scale = scale / 8 if base == "b" else scale
        return ("bandwidth" if per_second else "bytes"), scale
    return ("flops", scale) if per_second else None


def parse_quantity(text: str, dimension: Dimension, *, allow_zero: bool = False) -> float:
    """Parse `text` as a quantity of `dimension` in SI base units (bytes, bytes/s, s, FLOP/s)."""
    want = f"{dimension} ({_EXAMPLES[dimension]})"
    m = _QUANTITY.match(str(text))
    if not m or not m.group(2):
        raise UnitError(f"{text!r} is not a quantity with a unit; expected {want}")
    number, unit = m.groups()
    found = _dimension_and_scale(unit)
    if found is None:
        raise UnitError(f"{text!r}: unknown unit {unit!r}; expected {want}")
    if found[0] != dimension:
        raise UnitError(f"{text!r} has the wrong dimension ({found[0]}); expected {want}")
    with localcontext() as ctx:  # exact: enough digits for the typed number times a scale (at most 17 digits)
        ctx.prec, ctx.Emax, ctx.Emin = len(number) + 20, MAX_EMAX, MIN_EMIN
        value = float(Decimal(number) * found[1])  # the one rounding, to the nearest float
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise UnitError(f"{text!r}: must be {bound} and finite")
    return value


def format_quantity(value: float, dimension: Dimension) -> str:
    """Human form with a decimal prefix: 3.3e12 bandwidth -> '3.3 TB/s'."""
    if dimension == "time":
        for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if abs(value) >= scale or unit == "ns":
                return f"{value / scale:.4g} {unit}"
    suffix = {"bytes": "B", "bandwidth": "B/s", "flops": "FLOP/s"}[dimension]
    for prefix in ("P", "T", "G", "M", "k", ""):
        scale = float(_DECIMAL[prefix])
        if abs(value) >= scale or prefix == "":
            return f"{value / scale:.4g} {prefix}{suffix}"
    raise AssertionError("unreachable")
