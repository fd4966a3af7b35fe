"""Expert predictors: how a cost-aware policy guesses the experts a candidate will wake."""

from __future__ import annotations

from ecosim.errors import EcoSimError
from ecosim.predictors.base import ExpertPredictor, NoPredictor, OraclePredictor

BUILTIN = {"oracle": OraclePredictor, "none": NoPredictor}


def get_predictor(name: str) -> ExpertPredictor:
    """A built-in predictor by name (`oracle`, `none`), or a trained predictor file."""
    if name in BUILTIN:
        return BUILTIN[name]()
    raise EcoSimError(f"unknown predictor {name!r}; known: {', '.join(BUILTIN)}")


__all__ = ["BUILTIN", "ExpertPredictor", "NoPredictor", "OraclePredictor", "get_predictor"]
