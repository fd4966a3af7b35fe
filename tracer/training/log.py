"""Progress of a training loop: a line every `log_every` steps, and the means the metrics keep.

Each line shows the loss terms averaged over the last `log_every` steps, the learning rate,
seconds per step, the time left in this loop and the time since the run began.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

LAST = 50  # train_metrics.json keeps each loss term's mean over the last LAST steps


def fmt_time(s: float) -> str:
    """Whole seconds as `MmSSs` (e.g. 3m07s)."""
    s = int(s)
    return f"{s // 60:d}m{s % 60:02d}s"


def mean_last(hist: Sequence[Sequence[float]], k: int, terms: int) -> list[float]:
    """Mean of each of the first `terms` columns over the last `k` rows of `hist`."""
    return [sum(h[i] for h in hist[-k:]) / k for i in range(terms)]


class StepLog:
    """The loss terms of every step of one loop; prints progress lines as they come.

    `prefix` starts each line (`[target]`, `[draft] `); `terms` are the (name, format) of each
    value passed to `add`, in order; `t0` is when the whole run began.
    """

    def __init__(self, prefix: str, terms: Sequence[tuple[str, str]], steps: int, log_every: int, t0: float):
        self.prefix, self.terms, self.steps, self.log_every, self.t0 = prefix, terms, steps, log_every, t0
        self.hist: list[Sequence[float]] = []
        self.t_start = time.time()

    def add(self, step: int, values: Sequence[float], lr: float) -> None:
        """Record step `step` (0-based); print a line every `log_every` steps and at the last."""
        self.hist.append(values)
        if step % self.log_every == 0 or step == self.steps - 1:
            m = mean_last(self.hist, min(len(self.hist), self.log_every), len(values))
            el = time.time() - self.t_start
            eta = el / (step + 1) * (self.steps - step - 1)
            losses = " ".join(f"{name} {v:{fmt}}" for (name, fmt), v in zip(self.terms, m))
            print(
                f"{self.prefix} step {step + 1:5d}/{self.steps} {losses} "
                f"lr {lr:.2e} | {el / (step + 1):.2f}s/step "
                f"eta {fmt_time(eta)} total {fmt_time(time.time() - self.t0)}",
                flush=True,
            )

    def final(self, keys: Sequence[str]) -> dict[str, float]:
        """`keys[i]` -> mean of term i over the last LAST steps, and the loop's `seconds`."""
        means = mean_last(self.hist, min(len(self.hist), LAST), len(keys))
        return {**dict(zip(keys, means)), "seconds": time.time() - self.t_start}
