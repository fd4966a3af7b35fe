"""The gate's machinery: a kind of input declared once (a pydantic model), checked in one call, refused in one line.

A declaration is a pydantic model whose fields carry their type, range and meaning (`Field(description=...)`).
`check(kind, data, where)` validates a parsed document against its kind and turns the first problem into a
`GateError` naming the file, the field, the value found and what is allowed; `load(kind, path)` reads the JSON
file first (missing, a directory, empty, truncated, nested too deeply: each one line). `allowed(field)` is the
same text the docs' tables print (ecosim/gate/doc.py), so a refusal and the documentation say the same.

A new kind of file is one `declare(...)` next to its model; nothing else names it.
"""

from __future__ import annotations

import difflib
import json
import math
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types as at
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from ecosim.errors import EcoSimError


class GateError(EcoSimError):
    """Input refused at the gate: `file: field 'f' is V; allowed: A` (one line)."""

    def __init__(self, file: str, field: str | None, message: str):
        where = f"{file}: field '{field}'" if field else file
        super().__init__(f"{where} {message}" if field else f"{where}: {message}")
        self.file, self.field, self.detail = file, field, message

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (sweep workers) intact
        return (GateError, (self.file, self.field, self.detail))


@dataclass(frozen=True)
class Kind:
    """One kind of input document: its name in messages, its declaration and what it is, for a refusal."""

    name: str
    spec: type[BaseModel]
    what: str


KINDS: dict[str, Kind] = {}


def declare(name: str, spec: type[BaseModel], what: str) -> Kind:
    """Register a kind of input (`what` completes "expected ..."): the one line a new kind of file needs."""
    kind = Kind(name, spec, what)
    KINDS[name] = kind
    return kind


# ------------------------------------------------------------------ what a field allows, in words


def _strip_optional(t: Any) -> tuple[Any, bool]:
    args = typing.get_args(t)
    if typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True
    return t, False


def _num(x: Any) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**64:
        x = int(x)
    if isinstance(x, int) and abs(x) >= 10**6:
        for p in range(20, 65):
            if x == 2**p - 1:
                return f"2^{p}-1"
            if x == 2**p:
                return f"2^{p}"
        return f"{x:.3g}" if abs(x) < 1e21 else f"{float(x):.3g}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def bounds(metadata: list[Any]) -> str:
    """`in [1, 32767]`, `> 0`, `>= 0` from a field's annotated-types constraints; '' when unbounded."""
    lo = hi = None
    lo_open = hi_open = False
    for m in metadata:
        if isinstance(m, at.Ge):
            lo = m.ge
        elif isinstance(m, at.Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, at.Le):
            hi = m.le
        elif isinstance(m, at.Lt):
            hi, hi_open = m.lt, True
        elif isinstance(m, at.Interval):
            return bounds([at.Ge(m.ge) if m.ge is not None else None, at.Gt(m.gt) if m.gt is not None else None,
                           at.Le(m.le) if m.le is not None else None, at.Lt(m.lt) if m.lt is not None else None])
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_num(hi)}"
    return ""


def type_word(t: Any) -> str:
    """The docs' type column: string, int, number, bool, object, list, or the allowed words."""
    t, optional = _strip_optional(t)
    origin = typing.get_origin(t)
    if origin is Literal:
        word = "string" if all(isinstance(a, str) for a in typing.get_args(t)) else "int"
    elif t is bool:
        word = "bool"
    elif t is int:
        word = "int"
    elif t is float:
        word = "number"
    elif t is str:
        word = "string"
    elif origin is list or t is list:
        word = "list"
    elif origin is dict or t is dict or (isinstance(t, type) and issubclass(t, BaseModel)):
        word = "object"
    else:
        word = "any"
    return f"{word} or null" if optional else word


def _type_text(t: Any) -> str:
    t, optional = _strip_optional(t)
    origin = typing.get_origin(t)
    if origin is Literal:
        text = "one of " + ", ".join(json.dumps(a) for a in typing.get_args(t))
    elif origin is typing.Annotated:
        base, *meta = typing.get_args(t)
        b = bounds([m for x in meta for m in (x.metadata if isinstance(x, FieldInfo) else [x])])
        text = _type_text(base) + (f" {b}" if b else "")
    elif t is bool:
        text = "true or false"
    elif t is int:
        text = "an integer"
    elif t is float:
        text = "a finite number"
    elif t is str:
        text = "a string"
    elif origin is list or t is list:
        args = typing.get_args(t)
        text = f"a list of {_plural(_type_text(args[0]))}" if args else "a list"
    elif origin is dict or t is dict or (isinstance(t, type) and issubclass(t, BaseModel)):
        text = "an object"
    else:
        text = "a value"
    return f"{text}, or null" if optional else text


def _plural(text: str) -> str:
    for a, b in (("an integer", "integers"), ("a finite number", "finite numbers"), ("a string", "strings"),
                 ("an object", "objects")):
        if text.startswith(a):
            return b + text[len(a):]
    return text


def allowed(field: FieldInfo) -> str:
    """What a declared field allows, in words: type, range, null (the docs print the same)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "allowed" in extra:  # a field whose rule words say better than its type (cross-field ranges)
        return str(extra["allowed"])
    base, optional = _strip_optional(field.annotation)
    text = _type_text(base)
    b = bounds(field.metadata)
    text = f"{text} {b}" if b else text
    return f"{text}, or null" if optional else text


# ------------------------------------------------------------------ refusals


def _field_at(spec: type[BaseModel], loc: tuple[Any, ...]) -> FieldInfo | None:
    """The declared field a pydantic error location points at (list indices skipped)."""
    model: Any = spec
    found: FieldInfo | None = spec.model_fields["root"] if _is_root(spec) else None
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return found if part in ("int", "float", "str", "bool") else None
        found = model.model_fields[part]
        t, _ = _strip_optional(found.annotation)
        while typing.get_origin(t) in (list, dict):
            t, _ = _strip_optional(typing.get_args(t)[-1])
        model = t
    return found


def shown(value: Any) -> str:
    """A value as a refusal quotes it: JSON-like, cut short."""
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: "Infinity", -math.inf: "-Infinity"}.get(value, "NaN")
    try:
        text = json.dumps(value, allow_nan=True, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part in ("int", "float", "str", "bool", "function-after", "function-before"):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def refusal(spec: type[BaseModel], error: ValidationError, file: str) -> GateError:
    """The first problem of a failed validation as one GateError line."""
    e = error.errors(include_url=False)[0]
    loc = tuple(e["loc"])
    field = _dotted(loc)
    info = _field_at(spec, loc)
    rule = allowed(info) if info is not None else ""
    if e["type"] == "missing":
        return GateError(file, field, f"is missing; allowed: {rule}" if rule else "is missing")
    if e["type"] == "extra_forbidden":
        parent = _field_at(spec, loc[:-1]) if len(loc) > 1 else None
        owner: Any = spec if parent is None else _strip_optional(parent.annotation)[0]
        names = list(owner.model_fields) if isinstance(owner, type) and issubclass(owner, BaseModel) else []
        near = difflib.get_close_matches(str(loc[-1]), names, n=1)
        hint = f"did you mean '{near[0]}'? " if near else "misspelled? "
        return GateError(file, field, f"is not a known field ({hint.strip()}); allowed fields: {', '.join(names)}")
    if e["type"] in ("value_error", "assertion_error"):  # a cross-field rule: its own words
        msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return GateError(file, field or None, f"is {shown(e.get('input'))}: {msg}" if field else msg)
    if not rule:
        rule = str(e["msg"]).removeprefix("Input should be ")
    return GateError(file, field or None, f"is {shown(e.get('input'))}; allowed: {rule}" if field
                     else f"{shown(e.get('input'))}; expected {rule}")


def check(kind: str | Kind, data: Any, where: str | Path, undeclared: Iterable[str] = ()) -> Any:
    """Validate a parsed document against its declaration; return it unchanged, or raise GateError.

    `undeclared`: keys the reader knows but the declaration does not list yet (a dataclass field added since),
    let through untyped rather than refused as misspellings."""
    k = KINDS[kind] if isinstance(kind, str) else kind
    extra = set(undeclared) - set(k.spec.model_fields)
    try:
        k.spec.model_validate({a: b for a, b in data.items() if a not in extra} if extra and isinstance(data, dict) else data)
    except ValidationError as e:
        if not isinstance(data, dict) and not _is_root(k.spec):
            raise GateError(str(where), None, f"expected {k.what} (a JSON object), got {shown(data)}") from None
        raise refusal(k.spec, e, str(where)) from None
    except RecursionError:
        raise GateError(str(where), None, f"nested too deeply for {k.what}") from None
    return data


def check_value(spec: type[BaseModel], name: str, value: Any, what: str) -> Any:
    """One value against one declared field (a CLI override of a profile's field, `--bw` for `hbm_bw`):
    `WHAT is V for 'FIELD'; allowed: A`, the same rule a file with that field meets."""
    field = spec.model_fields[name]
    try:
        TypeAdapter(Annotated[field.annotation, field]).validate_python(value)
    except ValidationError:
        v = f"{value:.4g}" if isinstance(value, float) else shown(value)
        raise EcoSimError(f"{what} is {v} for '{name}'; allowed: {allowed(field)}") from None
    return value


def _is_root(spec: type[BaseModel]) -> bool:
    return "root" in spec.model_fields and len(spec.model_fields) == 1


def read_json(path: str | Path, what: str) -> Any:
    """A JSON file's parsed content, or one line saying why it cannot be read (NaN and Infinity are read, and
    refused by the declarations that need finite numbers)."""
    p = Path(path)
    if not p.exists():
        raise EcoSimError(f"{p}: no such file ({what} expected)")
    if not p.is_file():
        raise EcoSimError(f"{p}: not a file ({what} expected)")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise EcoSimError(f"{p}: unreadable ({e.strerror or e})") from None
    if not raw.strip():
        raise EcoSimError(f"{p}: empty file ({what} expected)")
    try:
        return json.loads(raw)
    except RecursionError:
        raise EcoSimError(f"{p}: not valid JSON (nested too deeply); expected {what}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise EcoSimError(f"{p}: not valid JSON ({str(e).splitlines()[0][:200]}); expected {what}") from None


def load(kind: str | Kind, path: str | Path, undeclared: Iterable[str] = ()) -> Any:
    """Read a JSON file and check it against its declaration: the gate for every file a user hands in."""
    k = KINDS[kind] if isinstance(kind, str) else kind
    return check(k, read_json(path, k.what), path, undeclared)
