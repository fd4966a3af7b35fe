"""`PolicySpec`: a policy and the values of its knobs, checked against its registry entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.policies import registry
from ecosim.policies.base import Policy

# The order positional knobs are given in, `PolicySpec("ecospec", 16, 0.5, "oracle")`: the knobs of
# the first four policies. A knob added since is given by keyword.
POSITIONAL = ("budget", "lam", "predictor", "score")


@dataclass(frozen=True, init=False)
class PolicySpec:
    """A policy and every knob it has (defaults filled in). A knob of another policy is accepted
    and dropped (`PolicySpec("ar", 8)` is ar: a policy ignores the knobs it has no use for, as a
    sweep collapses the axes a policy has no use for); a name no policy knows is an error. Reading
    a knob the policy lacks gives None (`PolicySpec("ar").budget`). A knob's word is a spelling of
    another policy: `PolicySpec("ecospec", lam="auto") == PolicySpec("ecospec-auto")`."""

    name: str
    knobs: tuple[tuple[str, Any], ...]

    def __init__(self, name: str = "ecospec", *args: Any, **given: Any):
        if len(args) > len(POSITIONAL):
            raise TypeError(f"at most {len(POSITIONAL)} positional knobs ({', '.join(POSITIONAL)})")
        for k, v in zip(POSITIONAL, args):
            if k in given:
                raise TypeError(f"knob {k!r} given twice")
            given[k] = v
        policy = registry.get(name)
        for k in policy.knobs:  # a knob's word names the policy that runs instead (`--lambda auto`)
            target = k.policy_for(given.get(k.name))
            if target is not None:
                policy, name = registry.get(target), target
                given = {n: v for n, v in given.items() if n != k.name}
                break
        known = {k.name for k in registry.knobs()}
        unknown = sorted(set(given) - known)
        if unknown:
            raise EcoSimError(f"unknown knob {unknown[0]!r}; known: {', '.join(sorted(known))}")
        values = tuple((k.name, k.coerce(given[k.name]) if k.name in given else k.default) for k in policy.knobs)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "knobs", values)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for k, v in self.__dict__.get("knobs", ()):
            if k == attr:
                return v
        if any(k.name == attr for k in registry.knobs()):
            return None
        raise AttributeError(f"PolicySpec has no knob {attr!r}")

    @property
    def policy(self) -> Policy:
        return registry.get(self.name)

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.knobs)

    @property
    def speculative(self) -> bool:
        """Whether a step builds a draft tree (and pays its draft time). A policy whose budget is 0
        verifies the root only: nothing is drafted, so it is `ar`, cost included."""
        p = self.policy
        return p.speculative and (p.budget is None or self.values[p.budget] > 0)

    def used(self) -> dict[str, Any]:
        """The knobs this policy uses, and only those, keyed by column (ar and the oracle have none)."""
        return {k.key: self.values[k.name] for k in self.policy.knobs}

    def label(self, full: bool = False) -> str:
        return self.policy.label(self.values, full)

    def columns(self) -> dict[str, Any]:
        """`policy` and every registered knob's column (None where the policy lacks the knob)."""
        mine = self.values
        return {"policy": self.name, **{k.key: mine.get(k.name) for k in registry.knobs()}}

    def cache_key(self, without: str | None = None) -> tuple:
        """What the selection depends on: the name and the knob values (less `without`)."""
        return (self.name, *((k, v) for k, v in self.knobs if k != without))

    @classmethod
    def from_columns(cls, rec: Mapping[str, Any], where: str, required: bool = True) -> PolicySpec:
        """A spec from a record keyed by columns (a results row, a winner's config). With `required`,
        a knob of the policy missing from the record is an error naming what the policy needs;
        else it takes its default."""
        policy = registry.get(rec.get("policy")) if rec.get("policy") in registry.names() else None
        if policy is None or policy.is_bound:
            raise EcoSimError(f"{where}: policy {rec.get('policy')!r} cannot be run; expected one of "
                              f"{', '.join(registry.runnable())}")
        missing = [k.key for k in policy.knobs if required and not k.optional and rec.get(k.key) is None]
        if missing:
            need = ", ".join(["policy", *(k.key for k in policy.knobs if not k.optional)])
            raise EcoSimError(f"{where}: missing {', '.join(repr(k) for k in missing)} (a {policy.name} winner needs {need})")
        try:
            return cls(policy.name, **{k.name: rec[k.key] for k in policy.knobs if rec.get(k.key) is not None})
        except EcoSimError as e:
            raise EcoSimError(f"{where}: {e}") from None
