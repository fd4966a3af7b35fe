"""The policy `validate run` puts to the test: a sweep's winner file, or flags.

What is read from a winner file (anything else in it is kept only as context):

- the document is either `ecosim sweep`'s winner.json (schema "ecosim-winner", a `winners` list, one
  entry per hardware x bandwidth x placement, each with a `config`), an object with a `config`, or a
  bare configuration object;
- the configuration needs `policy` (a policy of the registry that is not the bound) and each of
  that policy's knobs by column (`confidence` needs `budget`; `ecospec` needs `budget`, `lambda`
  and `predictor`), except the optional ones, which take their defaults (`score`: "difference");
- from a winners list the entry is `--entry N`, else the only entry with a configuration, else the
  only such entry placed on `hbm` (the one placement a single device runs); otherwise it is an error
  that lists the entries.

The policies run are the winner, the registry's baseline (`ar`, every speedup is quoted against it)
and `confidence` at the winner's budget (the EAGLE-2 rerank the winner must beat; budget 16 when
the winner has none), without duplicates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.policies import PolicySpec, registry
from ecosim.policies.knobs import BUDGET

RERANK = "confidence"  # the policy a winner must beat, at the winner's budget (the validation's design)


@dataclass(frozen=True)
class Choice:
    """The winner, the policies compared with it, and where it came from."""

    winner: PolicySpec
    source: str
    hardware: str | None = None
    placement: str | None = None
    predicted: dict[str, Any] | None = None  # the sweep's own figures for the winner, when given
    compared: tuple[PolicySpec, ...] = field(default=())

    @property
    def policies(self) -> list[PolicySpec]:
        """Winner first, then ar and confidence at the winner's budget (duplicates dropped)."""
        out: list[PolicySpec] = []
        labels: set[str] = set()
        for s in (self.winner, *self.compared):
            if s.label() not in labels:
                out.append(s)
                labels.add(s.label())
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"winner": spec_dict(self.winner), "source": self.source, "hardware": self.hardware,
                "placement": self.placement, "predicted": self.predicted}


def spec_dict(s: PolicySpec) -> dict[str, Any]:
    return {"policy": s.name, "label": s.label(), **{k: v for k, v in s.columns().items() if k != "policy"}}


def spec_from_dict(d: dict[str, Any]) -> PolicySpec:
    return PolicySpec.from_columns(d, "policy", required=False)


def _with_baselines(winner: PolicySpec, source: str, **kw: Any) -> Choice:
    budget = winner.budget if winner.budget is not None else BUDGET.default
    return Choice(winner, source, compared=(PolicySpec(registry.baseline().name), PolicySpec(RERANK, budget=budget)), **kw)


def spec_from_config(cfg: Any, where: str) -> PolicySpec:
    """A PolicySpec from a configuration object; one-line EcoSimError naming what is missing."""
    if not isinstance(cfg, dict):
        raise EcoSimError(f"{where}: the configuration is not a JSON object")
    return PolicySpec.from_columns(cfg, where)


def read_winner(path: Path, entry: int | None = None) -> Choice:
    """The Choice a winner file names (see the module docstring for what it must hold)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise EcoSimError(f"--winner {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise EcoSimError(f"--winner {path}: not JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise EcoSimError(f"--winner {path}: expected a JSON object")
    if "winners" in doc:
        winners = doc["winners"]
        if not isinstance(winners, list) or not winners:
            raise EcoSimError(f"--winner {path}: 'winners' is empty or not a list")
        if entry is not None:
            if not 0 <= entry < len(winners):
                raise EcoSimError(f"--entry {entry}: the winner file has {len(winners)} entries (0..{len(winners) - 1})")
            pick = entry
        else:
            have = [i for i, w in enumerate(winners) if isinstance(w, dict) and w.get("config")]
            if len(have) > 1:
                have = [i for i in have if str(winners[i].get("placement", "hbm")).startswith("hbm")] or have
            if len(have) != 1:
                listed = "; ".join(f"{i}: {w.get('hardware')} {w.get('placement')} {(w.get('config') or {}).get('policy')}"
                                   for i, w in enumerate(winners) if isinstance(w, dict))
                raise EcoSimError(f"--winner {path}: {len(have) or 'no'} entries with a configuration; pick one with --entry N ({listed})")
            pick = have[0]
        w = winners[pick]
        if not isinstance(w, dict) or not w.get("config"):
            raise EcoSimError(f"--winner {path}: entry {pick} has no configuration (no candidate met the sweep's constraint)")
        spec = spec_from_config(w["config"], f"--winner {path} entry {pick}")
        return _with_baselines(spec, f"{path} (entry {pick})", hardware=w.get("hardware"), placement=w.get("placement"),
                               predicted=w.get("predicted"))
    cfg = doc.get("config", doc)
    spec = spec_from_config(cfg, f"--winner {path}")
    return _with_baselines(spec, str(path), hardware=doc.get("hardware"), placement=doc.get("placement"),
                           predicted=doc.get("predicted"))


def from_flags(policy: str, knobs: dict[str, Any]) -> Choice:
    """The Choice given by --policy and its knob flags (a knob not given takes its default)."""
    given = {k.name: v for k in registry.knobs() if (v := knobs.get(k.name)) is not None}
    entry = registry.get(policy) if policy in registry.runnable() else None
    if entry is None:
        raise EcoSimError(f"--policy: policy {policy!r} cannot be run; expected one of {', '.join(registry.runnable())}")
    for k in registry.knobs():  # every value given is checked, used or not (`--lambda nan` is refused, not ignored)
        if k.name in given:
            try:
                k.coerce(given[k.name])
            except EcoSimError as e:
                raise EcoSimError(f"{k.flag}: {e}") from None
    values = {k.name: given.get(k.name, k.default) for k in entry.knobs}
    try:
        return _with_baselines(PolicySpec(policy, **values), "flags")
    except EcoSimError as e:
        raise EcoSimError(f"--policy: {e}") from None
