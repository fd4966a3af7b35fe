"""Values typed on a command line: ASCII decimal integers, ranges, and the one way to say that a legal value is
useless or implausible (a warning: one line on stderr, the run goes on).

An error is an EcoSimError (exit status 2); a warning is an `EcoSimWarning` through Python's warnings, which the
CLI prints as `ecosim: warning: ...` once per message, and a library caller may filter or turn into errors.
"""

from __future__ import annotations

import warnings

from ecosim.errors import EcoSimError

INT16_MAX = 2**15 - 1


class EcoSimWarning(UserWarning):
    """A legal value that has no effect or is implausible: said once, in one line, and the run goes on."""


def warn(message: str) -> None:
    warnings.warn(" ".join(message.split()), EcoSimWarning, stacklevel=2)


def ascii_int(text: str, what: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
    """An integer written in ASCII decimal digits (no `²`, no `٣`, no sign, no `1_000`) within [lo, hi]."""
    if not (text.isascii() and text.isdigit()):
        raise EcoSimError(f"{what}: {text!r} is not a whole number in ASCII digits; allowed: an integer in [{lo}, {hi}]")
    if len(text) > 19 or not lo <= int(text) <= hi:
        raise EcoSimError(f"{what}: {text} is outside [{lo}, {hi}]")
    return int(text)
