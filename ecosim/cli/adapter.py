"""Settings declared once, turned into typer options: the policy knobs of the registry and the
fields of config dataclasses (`CostConfig`) that carry an option in their metadata (ecosim/options.py).

A command declares one parameter (say `knobs: dict`) and `with_options("knobs", ...)` replaces it,
in the signature typer reads, by one `--flag` per option; the command receives their values as that
one dict. So a knob added to the registry is an option of every command that takes knobs, with
its help and default from where it is declared, and no command retypes either.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, get_type_hints

import typer

from ecosim.options import field_options
from ecosim.policies import Knob


@dataclass(frozen=True)
class Opt:
    """One option: the parameter name the value arrives under, its type, default, help and flag."""

    name: str
    type: Any
    default: Any
    help: str
    flag: str
    metavar: str | None = None  # `FLOAT|auto` for a knob that also takes words; None: typer's own


def knob_options(knobs: Iterable[Knob], axis: bool = False, defaults: dict[str, Any] | None = None,
                 unset: str | None = None) -> list[Opt]:
    """One option per knob; with `axis`, a list (a sweep's axis: repeatable or a comma list, as text). `defaults`
    overrides a knob's own default for one command; with `unset`, an option not given is None and
    its help starts with `unset` (the command applies the defaults itself)."""
    out = []
    for k in knobs:
        d = (defaults or {}).get(k.name, k.default)
        kind = str if k.words else k.type  # a word (`auto`) arrives as text; the knob coerces it
        meta = k.metavar or None
        if unset is not None:
            out.append(Opt(k.name, kind | None, None, f"{unset} {k.help} (default {d})", k.flag, meta))
        elif axis:
            ranges = " and/or inclusive ranges start:stop:step" if k.type in (int, float) else ""
            words = "".join(f", {w}" for w, _ in k.words)
            out.append(Opt(k.name, list[str], [str(d)], f"{k.help} Repeatable or a comma list{ranges}{words}.", k.flag))
        else:
            out.append(Opt(k.name, kind, d, k.help, k.flag, meta))
    return out


def config_options(cls: type) -> list[Opt]:
    """One text option per field of `cls` that declares one; not given: None, so the field's default
    (or, for CostConfig, the profile's value) applies and an explicit 0 still counts as given."""
    return [Opt(o.name, str | None, None, o.help, o.flag) for o in field_options(cls)]


def with_options(into: str, options: Callable[[], list[Opt]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Replace the command's parameter `into` by the options `options()` gives (read when the
    command is declared); the command gets their values as one dict under `into`."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        opts = options()
        hints = get_type_hints(fn, include_extras=True)
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.name != into:  # typer passes every value by keyword
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation)))
                continue
            for o in opts:
                annotation = Annotated[o.type, typer.Option(o.flag, help=o.help, metavar=o.metavar)]
                params.append(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=annotation))
        names = {o.name for o in opts}

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {n: kwargs.pop(n) for n in list(kwargs) if n in names}
            return fn(*args, **kwargs, **{into: values})

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        del command.__wrapped__  # typer must read the signature above, not the function's own
        return command

    return decorate
