"""What a selection policy is, for everything that runs, sweeps or validates one.

A policy is one `Policy` entry in the registry (registry.py): its name, its knobs, its label, and
how it selects in a `Context`. Nothing outside a policy's own module names it: the replay engines,
the sweep grid and results, the winner and `validate` read these entries.

Two ways to select:

- `select(ctx, knobs) -> mask`: a boolean mask over node rows, the root plus an ancestor-closed
  set of nodes per tree (`ar` and any policy that is not ordered);
- `order(ctx, knobs) -> (order, covers)`, for policies whose picks do not depend on the budget
  (the budget only ends the growth): the step (0, 1, ...) at which each non-root is picked, and
  the largest budget the order is exact for (`math.inf` when it is exact for every budget). The
  selection at budget b is the root plus the rows picked before step b; so one order serves every
  budget up to `covers`, a rule the engines and the sweep's batching apply once, for every such
  policy (replay.TraceReplay.selection, sweep/tasks.batch_tasks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from ecosim.catalog.models import ModelShape
from ecosim.cost import CostModel
from ecosim.errors import EcoSimError
from ecosim.predictors import ExpertPredictor, OraclePredictor
from ecosim.predictors.sets import PredictedSets
from ecosim.tree import Trees

T = TypeVar("T")
Knobs = Mapping[str, Any]


@dataclass(frozen=True)
class Knob:
    """One setting of a policy: a keyword of PolicySpec, a results column, a CLI option, a sweep axis.

    `check` raises EcoSimError (one line) on a bad value and returns the value, coerced; it must be
    cheap (it runs whenever a spec is built). `resolve` is the expensive check a command runs once,
    before any work (a predictor name that must load). `fingerprint` is the content hash of a value
    that names a file, so a sweep configuration changes id when the file changes.
    """

    name: str  # keyword and attribute of PolicySpec, e.g. "lam"
    type: type  # int, float or str
    default: Any
    help: str
    column: str = ""  # results column, JSON key and sweep axis; default: `name`
    check: Callable[[Any], Any] | None = None
    resolve: Callable[[Any], None] | None = None
    fingerprint: Callable[[Any], str | None] | None = None
    short: str = ""  # how a label shows it: "b=" for `b=16`; "" shows the bare value
    optional: bool = False  # a configuration read from a file may leave it out (it takes the default)
    # Words the knob accepts besides values of its type, each naming the policy that runs instead
    # (`--lambda auto` is ecospec-auto): a spelling, resolved by PolicySpec, so a word never
    # reaches a policy. Pairs, not a dict, so the knob stays hashable.
    words: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return self.column or self.name

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def metavar(self) -> str:
        """How --help shows the value: `FLOAT|auto` for a knob with words, else typer's own."""
        return "|".join([self.type.__name__.upper(), *(w for w, _ in self.words)]) if self.words else ""

    def policy_for(self, value: Any) -> str | None:
        """The policy a word given as this knob's value names, or None for an ordinary value."""
        if isinstance(value, str):
            return dict(self.words).get(value.strip().lower())
        return None

    @property
    def axis(self) -> str:
        """The sweep.json key of this knob's values (budgets, lambdas, ...)."""
        return self.key + "s"

    def coerce(self, value: Any) -> Any:
        """The value as this knob's type, checked (a word of the knob is returned as the word); a
        one-line EcoSimError otherwise."""
        if self.policy_for(value) is not None:
            return value.strip().lower()
        if isinstance(value, bool) or value is None:
            raise EcoSimError(f"{self.key} must be {self.type.__name__}, got {value!r}")
        try:
            if self.type is int:
                if isinstance(value, float) and value != int(value):
                    raise ValueError
                value = int(value)
            elif self.type is float:
                value = float(value)
            else:
                value = self.type(value)
        except (TypeError, ValueError):
            words = "".join(f" or {w!r}" for w, _ in self.words)
            raise EcoSimError(f"{self.key} must be {self.type.__name__}{words}, got {value!r}") from None
        return self.check(value) if self.check else value

    def show(self, value: Any) -> str:
        return f"{self.short}{value:g}" if isinstance(value, float) else f"{self.short}{value}"


@dataclass
class Context:
    """What a policy may use to select over one trace's candidate trees.

    `predicted(name)` is a predictor's expert sets for every row (predictors/sets.py; a live run's
    (rows, layers, m) ids), cached per trace; `true_routing(name)` says they are the trace's own routing (no id repeats in a layer).
    `memo(key, make)` keeps a value per trace (ranks, offsets: nothing that holds a budget).
    `cost` is the pricing in effect, for a policy whose entry says `priced` (None otherwise).
    """

    trees: Trees
    shape: ModelShape
    predicted: Callable[[str], PredictedSets | np.ndarray]
    predictor: Callable[[str], ExpertPredictor]
    memo: Callable[[Hashable, Callable[[], Any]], Any]
    cost: CostModel | None = None

    def true_routing(self, name: str) -> bool:
        return isinstance(self.predictor(name), OraclePredictor)


Role = Literal["selection", "baseline", "bound"]
Drafting = Literal["after", "before", "stops"]

# The one rule for what a step pays for drafting, shown by every command that takes --draft-steps.
DRAFTING_RULE = (
    "A step pays the draft steps it takes, at most the setting's N (--draft-steps; default: the recorded depth), "
    "each a forward of the draft kind plus its level's bookkeeping: a policy that decides after drafting (ecospec, "
    "confidence, evict, the presets) pays all N whatever it verifies; one that decides before drafting (ecospec-auto) "
    "pays N, or nothing on a step verifying the root alone; one that stops drafting at the depth it verifies (cascade) "
    "pays that depth. A setting that fixes its own steps (a preset's depth, vllm-chain's length) drafts those, at most N."
)
ALL_STEPS = np.inf  # a step drafting every step the setting allows (min(ALL_STEPS, N) = N)


@dataclass(frozen=True)
class Policy:
    """A registry entry (see the module docstring).

    `role`: "baseline" is the policy every speedup is quoted against (plain decoding), "bound" is
    not a selection but a bound computed by an engine (the oracle); a sweep always runs both, since
    its ratios need them. `budget` names the knob that only truncates an ordered policy's picks.
    `priced` says the selection depends on the cost model (its cache key then includes it).
    `weight` is a selection's rough relative cost, so a sweep starts heavy tasks first.
    """

    name: str
    help: str
    knobs: tuple[Knob, ...] = ()
    select: Callable[[Context, Knobs], np.ndarray] | None = None
    order: Callable[[Context, Knobs], tuple[np.ndarray, float]] | None = None
    budget: str | None = None
    label_knobs: tuple[str, ...] | None = None  # knobs a replay table's label shows; default all
    speculative: bool = True
    role: Role = "selection"
    priced: bool = False
    drafting: Drafting = "after"  # when the policy decides, so what its steps pay for drafting (DRAFTING_RULE)
    steps: Callable[[Knobs], int] | None = None  # draft steps its own setting fixes (a preset's depth, a chain's length)
    weight: Callable[[Knobs, int], float] = field(default=lambda knobs, pricings: 1.0 + 0.1 * pricings)

    def __post_init__(self) -> None:
        if self.role != "bound" and (self.select is None) == (self.order is None):
            raise ValueError(f"policy {self.name}: give exactly one of select and order")
        if self.order is not None and self.budget not in {k.name for k in self.knobs}:
            raise ValueError(f"policy {self.name}: an ordered policy names its budget knob")

    @property
    def is_bound(self) -> bool:
        return self.role == "bound"

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    def label(self, knobs: Knobs, full: bool = False) -> str:
        """`confidence b=16`; `full` shows every knob (a sweep's rows), else `label_knobs`."""
        shown = [k for k in self.knobs if full or self.label_knobs is None or k.name in self.label_knobs]
        return " ".join([self.name, *(k.show(knobs[k.name]) for k in shown)])

    def draft_steps(self, knobs: Knobs, verified: np.ndarray, deepest: np.ndarray) -> np.ndarray:
        """Draft steps each step asks for (DRAFTING_RULE), before the setting's N caps them: `verified`
        tokens and `deepest` verified depth per step; ALL_STEPS for all N. A float array (inf: all)."""
        n = len(verified)
        if not self.speculative or (self.budget is not None and knobs[self.budget] <= 0):
            return np.zeros(n)
        own = float(self.steps(knobs)) if self.steps is not None else ALL_STEPS
        if self.drafting == "stops":
            return np.minimum(deepest.astype(np.float64), own)
        full = np.full(n, own)
        return np.where(verified > 1, full, 0.0) if self.drafting == "before" else full

    def drafting_key(self, knobs: Knobs) -> tuple:
        """What `draft_steps` depends on besides the selection (a priced row's cache key)."""
        speculative = self.speculative and (self.budget is None or knobs[self.budget] > 0)
        return (self.drafting, self.steps(knobs) if self.steps is not None else None, speculative)

    def selection(self, ctx: Context, knobs: Knobs) -> np.ndarray:
        """The mask, for either way of selecting (an ordered policy's order computed for this budget)."""
        if self.order is not None:
            order, _ = self.order(ctx, knobs)
            return picked(ctx.trees, order, knobs[self.budget])  # type: ignore[index]
        if self.select is None:
            raise EcoSimError(f"{self.name} is a bound, not a selection policy")
        return self.select(ctx, knobs)


EXACT_FOR_EVERY_BUDGET = math.inf


def picked(trees: Trees, order: np.ndarray, budget: int) -> np.ndarray:
    """An ordered policy's selection at `budget`: the root and the rows picked before step
    `budget` (the one place a budget meets an order)."""
    return (trees.depth == 0) | (order < budget)
