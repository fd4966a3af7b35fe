"""What `validate calibrate` shows while it measures (minutes on a CPU): a bar in a terminal, else a
line at every tenth of the runs, so a log says how far it got and how long is left."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _line(text: str) -> None:
    print(f"validate: {text}", file=sys.stderr, flush=True)


@contextmanager
def calibration_progress(total: int, what: str, enabled: bool = True) -> Iterator[Callable[[], None]]:
    """Yields `tick()`, called after each timed run; `what` says what the runs are (one line first)."""
    if not enabled:
        yield lambda: None
        return
    _line(f"calibrating: {total} timed runs ({what})")
    console = Console(stderr=True)
    if console.is_terminal:
        columns = [TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("calibrating", total=total)
            yield lambda: bar.advance(task, 1)
        return
    t0, done, shown = time.perf_counter(), 0, 0

    def tick() -> None:
        nonlocal done, shown
        done += 1
        if done * 10 // total > shown or done == total:
            shown = done * 10 // total
            spent = time.perf_counter() - t0
            _line(f"calibrating: {done}/{total} runs, {spent:.0f} s, about {spent * (total - done) / done:.0f} s left")

    yield tick
