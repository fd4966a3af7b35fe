"""Expert predictors: how a cost-aware policy guesses the experts a candidate will wake.

Names `get_predictor` understands:

- `oracle`, `none`: the bounds (true routing; nothing predicted).
- `freq`, `token`, `context`: that kind trained on the fly on the trace being predicted,
  leave-requests-out (kfold.py: each request is predicted by a model fitted on other requests).
- anything else: a predictor file written by `ecosim predictor train` (store.py). A file whose
  name clashes with a kind above is reached with a path, e.g. `./token`.
"""

from __future__ import annotations

from pathlib import Path

from ecosim.errors import EcoSimError
from ecosim.predictors.base import (
    Candidates, ExpertPredictor, NoPredictor, OraclePredictor, ScoringPredictor, Selection, Shape,
)
from ecosim.predictors.train import KINDS

BUILTIN = {"oracle": OraclePredictor, "none": NoPredictor}


def check_name(name: str) -> None:
    """Refuse a predictor that is neither a known name nor an existing file, before any work."""
    if name not in BUILTIN and name not in KINDS and not Path(name).exists():
        raise EcoSimError(f"unknown predictor {name!r}: not one of {', '.join([*BUILTIN, *KINDS])} and no such file")


def reads_routing(name: str | None) -> bool:
    """Whether the predictor of that name is the true routing (a live run must look it up in a
    recorded trace rather than predict it); a name that is not a built-in never is."""
    return name in BUILTIN and BUILTIN[name].reads_routing


def get_predictor(name: str, *, selection: Selection | None = None, folds: int | None = None) -> ExpertPredictor:
    """A built-in predictor by name (`oracle`, `none`), a kind trained on the fly leave-requests-out
    (`freq`, `token`, `context`), or a trained predictor file. `selection` overrides how a scoring
    predictor takes its sets (a file's own default otherwise); `folds` the on-the-fly folds."""
    check_name(name)
    if name in BUILTIN:
        return BUILTIN[name]()
    if name in KINDS:
        from ecosim.predictors.kfold import FOLDS, KFoldPredictor
        return KFoldPredictor(name, folds or FOLDS, selection=selection or Selection())
    from ecosim.predictors.store import load
    pred = load(name)
    if selection is not None:
        pred.selection = selection
    return pred


__all__ = [
    "BUILTIN", "KINDS", "Candidates", "ExpertPredictor", "NoPredictor", "OraclePredictor", "ScoringPredictor",
    "Selection", "Shape", "check_name", "get_predictor", "reads_routing",
]
