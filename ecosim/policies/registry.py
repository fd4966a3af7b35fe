"""The policy registry: one entry per policy, in the order tables and sweeps list them.

Adding a policy is its module (a `POLICY = Policy(...)` entry, with any new `Knob`) plus one line
in `BUILTIN` below; the CLIs (`replay`, `sweep`, `validate run`), the sweep grid, the results
columns, the winner and the live selector find it here. `register` adds one at run time (a test,
a notebook). The `oracle` entry is the bound of oracle.py: an engine computes it, nothing selects
with it.
"""

from __future__ import annotations

from ecosim.errors import EcoSimError
from ecosim.policies import ar, cascade, confidence, ecospec, ecospec_auto, evict, presets
from ecosim.policies.base import Knob, Policy

ORACLE = Policy("oracle", "The bound over the recorded candidates: a shortest path over the accepted chains "
                "(oracle.py), needing the verdicts; not a selection.", role="bound",
                weight=lambda knobs, pricings: 5.0 * pricings)

DEFAULT = "ecospec"  # the policy a command headlines when none is named (replay's --json)
BUILTIN = (ar.POLICY, confidence.POLICY, ecospec.POLICY, ecospec_auto.POLICY, evict.POLICY, cascade.POLICY,
           presets.EAGLE2, presets.SGLANG, presets.VLLM_CHAIN, ORACLE)

_ENTRIES: dict[str, Policy] = {}


def register(policy: Policy) -> Policy:
    """Add a policy; its knobs may be new, or the very `Knob` objects other policies share."""
    if policy.name in _ENTRIES:
        raise ValueError(f"policy {policy.name!r} is already registered")
    for k in policy.knobs:
        other = _knob_named(k.name)
        if other is not None and other != k:
            raise ValueError(f"policy {policy.name}: a different knob is already called {k.name!r}")
        if other is None and any(k.key == o.key for o in knobs()):
            raise ValueError(f"policy {policy.name}: knob column {k.key!r} is taken")
    for k in policy.knobs:  # a word names another policy, one without the knob (a spelling, not a loop)
        for word, target in k.words:
            if target == policy.name or (target in _ENTRIES and _ENTRIES[target].knob(k.name) is not None):
                raise ValueError(f"knob {k.name}: word {word!r} names {target}, which has the knob itself")
    if policy.role != "selection" and any(p.role == policy.role for p in _ENTRIES.values()):
        raise ValueError(f"policy {policy.name}: there is already a {policy.role}")
    _ENTRIES[policy.name] = policy
    return policy


def unregister(name: str) -> None:
    """Remove a policy added with `register` (built-in entries stay)."""
    if name in (p.name for p in BUILTIN):
        raise ValueError(f"{name} is built in")
    _ENTRIES.pop(name, None)


def names() -> tuple[str, ...]:
    """Every policy, in registration order with the bound last: the order tables and grids use."""
    return tuple(sorted(_ENTRIES, key=lambda n: _ENTRIES[n].is_bound))


def get(name: str) -> Policy:
    """The entry of a policy; one-line EcoSimError naming the known ones otherwise."""
    try:
        return _ENTRIES[name]
    except (KeyError, TypeError):
        raise EcoSimError(f"unknown policy {name!r}; known: {', '.join(names())}") from None


def runnable() -> tuple[str, ...]:
    """Policies that select (every entry but the bound)."""
    return tuple(n for n in names() if not _ENTRIES[n].is_bound)


def baseline() -> Policy:
    """The policy every speedup is quoted against (plain decoding)."""
    return next(p for p in _ENTRIES.values() if p.role == "baseline")


def bound() -> Policy:
    """The bound every `of oracle` fraction is quoted against."""
    return next(p for p in _ENTRIES.values() if p.role == "bound")


def references() -> tuple[str, ...]:
    """What a sweep always runs, since its ratios need them: the baseline and the bound."""
    return (baseline().name, bound().name)


def knobs() -> list[Knob]:
    """Every knob of every policy, once, in registration order."""
    out: dict[str, Knob] = {}
    for p in _ENTRIES.values():
        for k in p.knobs:
            out.setdefault(k.name, k)
    return list(out.values())


def knob_by_key(key: str) -> Knob:
    return next(k for k in knobs() if k.key == key)


def _knob_named(name: str) -> Knob | None:
    return next((k for k in knobs() if k.name == name), None)


def order_of(name: str) -> int:
    """Position in `names()`."""
    return names().index(name)


for _p in BUILTIN:
    register(_p)
for _k in knobs():  # a knob's word names a policy that exists (checked once the built-ins are in)
    for _w, _target in _k.words:
        get(_target)
