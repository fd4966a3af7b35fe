"""How much work each phase does on one target, from its share of the time budget and a probe.

The probe times one decoding position as the recorder runs it (a draft tree expanded from a
root, then one target forward over the whole tree) after a short context, the second of two runs.
Every later phase is counted in such steps: a recorded position, a calibration run (a draft step,
then a verify), a decoding step are each about one; a recomputed node (one plain forward over its
whole sequence) about half. Each phase's share of the target's time is then turned into sizes:

    record      20%   prompts x tokens positions (tokens shrink first, to 4; then prompts, to 2)
    recompute    5%   nodes (at least 2)
    calibrate   35%   repeats of the trace design (1-5), then the step table's repeats
    run         40%   repeats of every (request, policy) decode (1-3)

A phase that overruns leaves less to the next target, whose share is what remains divided by the
targets left; the sizes are written in the summary, so a reader sees what the budget allowed.
The probe leaves out what a real phase adds around the forwards (selection, bookkeeping, loading),
so once the trace is recorded its measured seconds per position replace the probe's, and the
calibration and run are sized again from that and the time the target has left (`resize`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

SHARES = {"record": 0.20, "recompute": 0.05, "calibrate": 0.35, "run": 0.40}
POLICIES = 3  # ecospec, ar, confidence


@dataclass
class Plan:
    """The sizes of one target's phases."""

    tokens: int
    prompts: int
    sample: int
    calib_tokens: tuple[int, ...]
    calib_repeats: int
    table_tokens: tuple[int, ...]
    repeats: int
    budget: int
    seed: int = 0
    tree: dict[str, int] = field(default_factory=dict)
    step_s: float = 0.0
    share_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe(pair: Any, tree: dict[str, int]) -> float:
    """Seconds of one recorded position (draft tree + one verify of it), the second of two runs."""
    import torch

    from tracer.tree import expand_tree
    from tracer.verify import verify_tree
    from validate.clock import WallClock

    clock = WallClock(pair.target.device)
    ids = torch.arange(3, 35, dtype=torch.long) % pair.target.vocab_size
    seconds = 0.0
    for _ in range(2):
        pair.target.reset()
        pair.draft.reset()
        root = int(pair.target.extend(ids)[-1].argmax())
        pair.draft.extend(ids)
        t0 = clock.now()
        t = expand_tree(pair.draft, root, tree["depth"], tree["topk"], tree["max_nodes"], pair.target.vocab_size)
        verify_tree(pair.target, pair.capture, t)
        seconds = clock.now() - t0
    pair.target.reset()
    pair.draft.reset()
    return max(seconds, 1e-4)


def make_plan(share_s: float, step_s: float, prompts: int, tokens: int, sample: int, tree: dict[str, int],
              small: bool, seed: int) -> Plan:
    """Sizes that fit `share_s` seconds at `step_s` seconds a step (module docstring)."""
    steps = lambda phase: SHARES[phase] * share_s / step_s  # noqa: E731
    while prompts * tokens > steps("record") and (tokens > 4 or prompts > 2):
        if tokens > 4:
            tokens = max(4, tokens // 2)
        else:
            prompts -= 1
    sample = max(2, min(sample, int(steps("recompute") * 2)))
    budget = min(4 if small else 8, tree["max_nodes"])
    calib_tokens = tuple(sorted({n for n in (1, 2, 3, 4, 6) if n <= budget} | {budget + 1}))
    cases = 2 + 4 * (len(calib_tokens) - 1)
    table_tokens = (1, 4, 8) if small else (1, 4, 16, 32)
    plan = Plan(tokens, prompts, sample, calib_tokens, 1, table_tokens, 1, budget, seed, dict(tree), step_s, share_s)
    return resize(plan, share_s * (SHARES["calibrate"] + SHARES["run"]), step_s)


def resize(plan: Plan, left_s: float, step_s: float) -> Plan:
    """The calibration's and the run's repeats for `left_s` seconds at `step_s` seconds a step."""
    later = SHARES["calibrate"] + SHARES["run"]
    steps = lambda phase: SHARES[phase] / later * left_s / step_s  # noqa: E731
    cases = 2 + 4 * (len(plan.calib_tokens) - 1)
    plan.calib_repeats = max(1, min(5, int(0.8 * steps("calibrate") / (2 * cases))))
    plan.repeats = max(1, min(3, int(steps("run") / (plan.prompts * plan.tokens * (POLICIES + 1)) - 0.5)))
    plan.step_s = step_s
    return plan
