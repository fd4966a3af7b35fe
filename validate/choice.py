"""The policy `validate run` puts to the test: a sweep's winner file, or flags.

What is read from a winner file (anything else in it is kept only as context):

- the document is either `ecosim sweep`'s winner.json (schema "ecosim-winner", a `winners` list, one
  entry per hardware x bandwidth x placement, each with a `config`), an object with a `config`, or a
  bare configuration object;
- the configuration needs `policy` (ar, confidence or ecospec); `confidence` needs `budget`;
  `ecospec` needs `budget`, `lambda` and `predictor`; `score` is optional (default "difference");
- from a winners list the entry is `--entry N`, else the only entry with a configuration, else the
  only such entry placed on `hbm` (the one placement a single device runs); otherwise it is an error
  that lists the entries.

The policies run are the winner, `ar` (the baseline every speedup is quoted against) and
`confidence` at the winner's budget (the EAGLE-2 rerank the winner must beat), without duplicates.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.policies import DEFAULTS, PolicySpec

RUNNABLE = ("ar", "confidence", "ecospec")
NEEDS = {"ar": ("policy",), "confidence": ("policy", "budget"), "ecospec": ("policy", "budget", "lambda", "predictor")}
DEFAULT_BUDGET = DEFAULTS.budget


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
    return {"policy": s.name, "label": s.label(), "budget": s.budget, "lambda": s.lam, "predictor": s.predictor,
            "score": s.score}


def spec_from_dict(d: dict[str, Any]) -> PolicySpec:
    return PolicySpec(d["policy"], int(d["budget"]), float(d["lambda"]), str(d["predictor"]), d.get("score", "difference"))


def _with_baselines(winner: PolicySpec, source: str, **kw: Any) -> Choice:
    budget = winner.budget if winner.name != "ar" else DEFAULT_BUDGET
    return Choice(winner, source, compared=(PolicySpec("ar", 0, 0.0, "none"), PolicySpec("confidence", budget, 0.0, "none")), **kw)


def spec_from_config(cfg: Any, where: str) -> PolicySpec:
    """A PolicySpec from a configuration object; one-line EcoSimError naming what is missing."""
    if not isinstance(cfg, dict):
        raise EcoSimError(f"{where}: the configuration is not a JSON object")
    name = cfg.get("policy")
    if name not in RUNNABLE:
        raise EcoSimError(f"{where}: policy {name!r} cannot be run; expected one of {', '.join(RUNNABLE)}")
    missing = [k for k in NEEDS[name] if cfg.get(k) is None]
    if missing:
        raise EcoSimError(f"{where}: missing {', '.join(repr(k) for k in missing)} (a {name} winner needs "
                          f"{', '.join(NEEDS[name])})")
    b, lam = cfg.get("budget"), cfg.get("lambda")
    b = 0 if b is None else b
    lam = 0.0 if lam is None else lam
    if isinstance(b, bool) or not isinstance(b, (int, float)) or int(b) != b or b < 0:
        raise EcoSimError(f"{where}: budget must be a non-negative integer, got {cfg.get('budget')!r}")
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
        raise EcoSimError(f"{where}: lambda must be a finite number >= 0, got {cfg.get('lambda')!r}")
    budget = int(b)
    lam = float(lam)
    if cfg.get("score") not in (None, "difference", "ratio"):
        raise EcoSimError(f"{where}: score must be difference or ratio, got {cfg.get('score')!r}")
    predictor = str(cfg.get("predictor") or "none")
    return PolicySpec(name, budget, lam, predictor, cfg.get("score") or "difference")


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


def from_flags(policy: str, budget: int | None, lam: float | None, predictor: str | None, score: str | None) -> Choice:
    """The Choice given by --policy/--budget/--lambda/--predictor/--score."""
    cfg = {"policy": policy, "budget": budget if budget is not None else (DEFAULT_BUDGET if policy != "ar" else None),
           "lambda": lam if lam is not None else (DEFAULTS.lam if policy == "ecospec" else None),
           "predictor": predictor if predictor is not None else (DEFAULTS.predictor if policy == "ecospec" else None),
           "score": score}
    return _with_baselines(spec_from_config(cfg, "--policy"), "flags")
