"""Config fields that are command-line options: a default lives once, on the dataclass field.

A field declares its option with `metadata=option(flag, help, parse)`: the flag, a help text that
names the units, and a parser from the text a user types to the field's value. `from_options`
builds the dataclass from the texts that were given (None: not given, the field's default stays),
so an explicit `0` is a value like any other. `ecosim/cli/adapter.py` turns the same metadata into
typer options; nothing here imports typer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.units import parse_quantity

Parse = Callable[[str], Any]


@dataclass(frozen=True)
class FieldOption:
    """One field's option: its field name, flag, help (with units and what not giving it means) and parser."""

    name: str
    flag: str
    help: str
    parse: Parse


def option(flag: str, help: str, parse: Parse) -> dict[str, Any]:
    """The metadata of a field that is a CLI option (read by `field_options`)."""
    return {"option": (flag, help, parse)}


def field_options(cls: type) -> list[FieldOption]:
    """The options of a config dataclass, in field order (fields without an option are skipped)."""
    return [FieldOption(f.name, *f.metadata["option"]) for f in dataclasses.fields(cls) if "option" in f.metadata]


def from_options(cls: type, texts: Mapping[str, str | None], **values: Any) -> Any:
    """`cls` from the option texts given (by field name; None: not given) plus ready `values`.
    A text that does not parse is one line naming its flag."""
    kw = dict(values)
    for o in field_options(cls):
        text = texts.get(o.name)
        if text is None:
            continue
        try:
            kw[o.name] = o.parse(text)
        except EcoSimError as e:
            raise EcoSimError(f"{o.flag}: {e}") from None
    return cls(**kw)


def choice(*allowed: str) -> Parse:
    """A parser accepting one of `allowed`, exactly as written."""

    def parse(text: str) -> str:
        if text not in allowed:
            raise EcoSimError(f"must be {' or '.join(allowed)}, got {text!r}")
        return text

    return parse


def fraction(text: str) -> float:
    """A fraction of a peak, in [0.01, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise EcoSimError(f"{text!r} is not a number (a fraction in [0.01, 1])") from None
    if not 0.01 <= value <= 1.0:
        raise EcoSimError(f"{text!r} is outside [0.01, 1]")
    return value


def duration(text: str) -> float:
    """A non-negative time with its unit (25us, 1.5ms, 0s), in seconds."""
    return parse_quantity(text, "time", allow_zero=True)
