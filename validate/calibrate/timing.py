"""How to time: the benchmark protocol, the raw samples, and the shuffled run of a design.

Runs go in a seeded shuffled order, a draft step before each verify of more than one token (as
speculative decoding alternates them), with the garbage collector off while timing.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError
from validate.calibrate.config import CalibConfig
from validate.calibrate.design import Case, grid_design
from validate.clock import Clock


class Bench(Protocol):
    """What the measurement loop drives; `run_*` is the timed part, the rest is set-up."""

    shape: ModelShape

    def set_context(self, tokens: int) -> None: ...
    def prepare_verify(self, experts: np.ndarray, parents: np.ndarray | None = None) -> None: ...  # forced routing
    def run_verify(self) -> None: ...
    def after_verify(self) -> None: ...
    def prepare_draft(self, accepted: int) -> None: ...
    def run_draft(self) -> None: ...
    def after_draft(self) -> None: ...


@dataclass
class Samples:
    """Raw timings: verify runs (one row per run, with its case) and draft runs."""

    case: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    unions: list[list[int]] = field(default_factory=list)  # per layer
    contexts: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    draft_seconds: list[float] = field(default_factory=list)

    def cases(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per (case, context): n, unions (cases, layers), c, median seconds, runs."""
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (case, c) in enumerate(zip(self.case, self.contexts)):
            groups.setdefault((case, c), []).append(i)
        keys = sorted(groups)
        first = [groups[k][0] for k in keys]
        n = np.array([self.tokens[i] for i in first], dtype=np.int64)
        u = np.array([self.unions[i] for i in first], dtype=np.int64).reshape(len(keys), -1)
        c = np.array([self.contexts[i] for i in first], dtype=np.int64)
        med = np.array([float(np.median([self.seconds[i] for i in groups[k]])) for k in keys])
        runs = np.array([len(groups[k]) for k in keys])
        return n, u, c, med, runs

    def case_kinds(self) -> list[str]:
        """Per (case, context), in the order of `cases()`: the design's kind of the case."""
        groups: dict[tuple[int, int], str] = {}
        for case, c, kind in zip(self.case, self.contexts, self.kinds):
            groups.setdefault((case, c), kind)
        return [groups[k] for k in sorted(groups)]


class Calibration:
    """The design's runs in a seeded shuffled order, run a slice at a time (`step`), so that a
    caller can interleave them with other work (`validate run` spreads them between its decoding
    rounds, so both meet the same load from other processes)."""

    def __init__(self, bench: Bench, clock: Clock, cfg: CalibConfig, design: list[Case] | None = None):
        cfg.check()
        self.bench, self.clock, self.cfg = bench, clock, cfg
        rng = np.random.default_rng(cfg.seed)
        self.cases = design if design is not None else grid_design(cfg, bench.shape, rng)
        if not self.cases:
            raise EcoSimError("calibration: the design has no cases")
        runs = [(i, c) for c in cfg.contexts for i in range(len(self.cases)) for _ in range(cfg.repeats)]
        self.runs = [runs[j] for j in rng.permutation(len(runs))]
        self.done = 0
        self.trial = 0
        self.warm: set[int] = set()
        self.samples = Samples()

    @property
    def remaining(self) -> int:
        """Runs not yet made."""
        return len(self.runs) - self.done

    def step(self, count: int | None = None, progress: Any = None) -> int:
        """Run the next `count` runs (all that remain by default); returns how many remain."""
        bench, clock, out = self.bench, self.clock, self.samples
        end = len(self.runs) if count is None else min(len(self.runs), self.done + max(0, count))
        gc_was = gc.isenabled()
        gc.disable()
        try:
            while self.done < end:
                i, c = self.runs[self.done]
                case = self.cases[i]
                bench.set_context(c)
                if c not in self.warm:  # first use of a context: untimed runs to settle it
                    self.warm.add(c)
                    big = max(self.cases, key=lambda x: x.n)
                    for _ in range(self.cfg.warmup):
                        _draft(bench, clock, 0)
                        bench.prepare_verify(big.experts, big.parents)
                        bench.run_verify()
                        bench.after_verify()
                # a draft step, then a verify, as speculative decoding alternates them (each leaves the
                # caches in the state the other finds them in during a real run); a one-token verify
                # follows the previous verify directly, as in plain (ar) decoding
                if case.n > 1:
                    out.draft_seconds.append(_draft(bench, clock, self.trial % 4))
                    self.trial += 1
                bench.prepare_verify(case.experts, case.parents)
                t0 = clock.now()
                bench.run_verify()
                t1 = clock.now()
                bench.after_verify()
                out.case.append(int(i))
                out.kinds.append(case.kind)
                out.tokens.append(case.n)
                out.unions.append(case.union)
                out.contexts.append(c)
                out.seconds.append(t1 - t0)
                self.done += 1
                if progress:
                    progress()
        finally:
            if gc_was:
                gc.enable()
        return self.remaining


def measure(bench: Bench, clock: Clock, cfg: CalibConfig, design: list[Case] | None = None, progress: Any = None) -> Samples:
    """Time every case of `design` (default: the grid) `repeats` times at every context, in a
    shuffled order, each verify of more than one token after a timed draft step."""
    cal = Calibration(bench, clock, cfg, design)
    cal.step(progress=progress)
    return cal.samples


def _draft(bench: Bench, clock: Clock, accepted: int) -> float:
    """Seconds of one draft step with `accepted` tokens fed in its first forward."""
    bench.prepare_draft(accepted)
    t0 = clock.now()
    bench.run_draft()
    t1 = clock.now()
    bench.after_draft()
    return t1 - t0
