"""The recording's progress bar (rich, on stderr): positions done, positions per second, time left."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeRemainingColumn
from rich.text import Text


class RateColumn(ProgressColumn):
    """Recorded positions (verified trees) per second."""

    def render(self, task: Task) -> Text:
        return Text("  -  pos/s" if task.speed is None else f"{task.speed:6.2f} pos/s")


@contextmanager
def progress_bar(total: int, done: int = 0, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """Yields `advance(n)`; draws nothing when disabled or when stderr is not a terminal."""
    if not enabled:
        yield lambda n: None
        return
    console = Console(stderr=True)
    columns = [TextColumn("recording"), BarColumn(), MofNCompleteColumn(), RateColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar:
        task = bar.add_task("recording", total=total, completed=done)
        yield lambda n: bar.advance(task, n) if n else None
