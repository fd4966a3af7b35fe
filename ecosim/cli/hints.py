"""Warnings for option values that are legal but do nothing here: a knob no chosen policy reads (`--lambda auto
--policy confidence`), a budget no tree of the traces reaches. One line each on stderr (gate/values.warn); the
run goes on. Errors for values out of range are the knobs' and the declarations' own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ecosim.gate.values import warn
from ecosim.policies import PolicySpec, registry


def given_knobs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The knob values that differ from their defaults (a word such as `auto` always counts): what the user set."""
    defaults = {k.name: k for k in registry.knobs()}
    out = {}
    for name, value in knobs.items():
        k = defaults.get(name)
        if k is None or value is None:
            continue
        if isinstance(value, str) and k.policy_for(value) is not None:
            out[name] = value
            continue
        try:
            if k.coerce(value) != k.default:
                out[name] = value
        except Exception:  # noqa: BLE001 - a bad value is the knob's own error, raised where the spec is built
            out[name] = value
    return out


def knob_hints(knobs: Mapping[str, Any], specs: Iterable[PolicySpec], manifests: Iterable[Mapping[str, Any]]) -> None:
    """Warn about each knob set by the user that the chosen policies ignore, and a budget above every tree."""
    specs = list(specs)
    given = given_knobs(knobs)
    chosen = {s.name for s in specs} | {s.policy.name for s in specs}
    for name, value in given.items():
        k = next(k for k in registry.knobs() if k.name == name)
        if not any(s.policy.knob(name) for s in specs) and not (isinstance(value, str) and k.policy_for(value) in chosen):
            users = [n for n in registry.names() if registry.get(n).knob(name)]
            warn(f"{k.flag} {value} has no effect on {', '.join(sorted(chosen))} (policies that read it: {', '.join(users)})")
    budget = given.get("budget")
    trees = [int(m.get("tree", {}).get("max_nodes", 0)) for m in manifests]
    if budget is not None and trees and any(s.policy.knob("budget") for s in specs) and int(budget) > max(trees):
        warn(f"--budget {budget} is above every tree of these traces (at most {max(trees)} candidates besides the "
             f"root): it verifies the same as --budget {max(trees)}")


def axis_hints(given: Mapping[str, list[str] | None], axes: Mapping[str, list[Any]], policies: Iterable[str],
               manifests: Iterable[Mapping[str, Any]]) -> None:
    """A sweep's version of `knob_hints`: an axis `given` away from its default that no swept policy
    reads (it is not swept at all), and budgets of the parsed `axes` above every tree (each verifies
    what the largest tree does)."""
    chosen = set(policies)
    knobs = {k.name: k for k in registry.knobs()}
    set_by_user = {n: v for n, v in given.items() if n in knobs and v and v != [str(knobs[n].default)]}
    for name, values in set_by_user.items():
        if name in axes:
            continue
        readers = [n for n in registry.names() if registry.get(n).knob(name)]
        warn(f"{knobs[name].flag} {','.join(values)} has no effect on {', '.join(sorted(chosen))} (policies that read it: "
             f"{', '.join(readers)}): it is not an axis of this sweep")
    trees = [int(m.get("tree", {}).get("max_nodes", 0)) for m in manifests]
    budgets = axes.get("budget", []) if "budget" in set_by_user else []  # the default axis is no one's choice
    above = sorted({int(b) for b in budgets if isinstance(b, (int, float)) and trees and b > max(trees)})
    if above:
        warn(f"--budget {','.join(map(str, above))} above every tree of these traces (at most {max(trees)} candidates "
             f"besides the root): each verifies the same as --budget {max(trees)}")
