"""Knobs more than one policy uses (a policy's own knob lives in its module)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from ecosim.errors import EcoSimError
from ecosim.policies.base import Knob
from ecosim.predictors import BUILTIN, KINDS, get_predictor

SCORES = ("difference", "ratio")


MAX_BUDGET = 2**15 - 2  # candidates besides the root in the largest tree the format holds (node ids are int16)


def _budget(b: int) -> int:
    if not 0 <= b <= MAX_BUDGET:
        raise EcoSimError(f"budget must be in [0, {MAX_BUDGET}] (a tree holds at most {MAX_BUDGET + 1} nodes), got {b}")
    return b


def _lam(x: float) -> float:
    if not math.isfinite(x) or x < 0:
        raise EcoSimError(f"lambda must be finite and >= 0, got {x}")
    return x


def _load_predictor(name: str) -> None:
    get_predictor(name)  # an unknown name or an unreadable file is a one-line error, before any work


def file_fingerprint(name: str) -> str | None:
    """A file's content hash (a retrained predictor file is a new sweep configuration); None for a name."""
    p = Path(name)
    if p.is_file():
        return hashlib.sha256(p.read_bytes()).hexdigest()[:32]
    return None


def _score(s: str) -> str:
    if s not in SCORES:
        raise EcoSimError(f"unknown score {s!r}; known: {', '.join(SCORES)}")
    return s


BUDGET = Knob("budget", int, 16, "Nodes a step may verify besides the root (EAGLE's total_token - 1).",
              check=_budget, short="b=")
LAMBDA = Knob("lam", float, 0.5, "ecospec's cost weight: value - lambda x (new experts / (moe_layers x top_k)); "
              "auto: no weight, per step the subtree of most expected tokens per second (runs ecospec-auto).",
              column="lambda", check=_lam, short="λ=", words=(("auto", "ecospec-auto"),))
PREDICTOR = Knob("predictor", str, "token",
                 f"Expert predictor ecospec scores with: {', '.join(KINDS)} (trained on the fly on the trace's other "
                 f"requests, k-fold), a predictor file from `ecosim predictor train`, or one of {', '.join(BUILTIN)} "
                 "(oracle: true routing, an upper bound).", resolve=_load_predictor, fingerprint=file_fingerprint)
SCORE = Knob("score", str, "difference",
             "ecospec's score: difference (value - lambda*cost) or ratio (value / (1 + lambda*cost)).", check=_score, optional=True)


def _value(s: str) -> str:
    if s not in VALUES:
        raise EcoSimError(f"unknown value {s!r}; known: {', '.join(VALUES)}")
    return s


VALUES = ("calibrated", "raw")
VALUE = Knob("value", str, "calibrated",
             "What ecospec-auto and evict count a node as worth: calibrated (P(accepted) fitted on the trace's other "
             "requests, acceptance.py) or raw (exp of the draft's cumulative log-prob).", check=_value, optional=True)
