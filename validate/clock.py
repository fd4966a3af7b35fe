"""Wall clocks for measured steps.

`WallClock.now()` is `time.perf_counter()`, after `torch.cuda.synchronize` on a CUDA device, so the
kernels a phase queued are counted in that phase and not in the next: the default, and what the
measured phases are meant to be. `ThreadClock.now()` is `time.thread_time()`, the CPU seconds of the calling thread:
on a CPU shared with other jobs it leaves out the time the process waited to be scheduled (on this
project's 2-core machines, under other engineers' load, wall time was twice the CPU time and four
times as noisy). It is exact only when torch computes in the calling thread (`--threads 1`), and
meaningless on a GPU, so `make_clock` refuses it elsewhere. `FakeClock` is advanced by hand: the
calibration tests drive a synthetic timing model through it.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since an arbitrary origin; everything queued before the call has finished."""
        ...


class WallClock:
    """perf_counter, synchronised with the device when it is a GPU."""

    def __init__(self, device: Any = "cpu"):
        import torch

        self.device = torch.device(device)
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else None

    def now(self) -> float:
        if self._sync is not None:
            self._sync(self.device)
        return time.perf_counter()


class ThreadClock:
    """CPU seconds of the calling thread (torch with one thread computes there)."""

    def now(self) -> float:
        return time.thread_time()


CLOCKS = ("auto", "wall", "cpu")


def resolve_clock(kind: str, device: str, threads: int | None) -> str:
    """`auto` (the commands' default): `cpu` on a CPU device with one torch thread, where a machine
    shared with other jobs would otherwise put the scheduler's waits into every timing (and into a
    calibration and a run made at different moments differently), else `wall`; other kinds as given."""
    if kind != "auto":
        return kind
    return "cpu" if str(device) == "cpu" and threads == 1 else "wall"


def make_clock(kind: str, device: Any) -> Clock:
    """`wall` (synchronised perf_counter) or `cpu` (thread CPU time; CPU device, one torch thread)."""
    import torch

    from ecosim.errors import EcoSimError

    if kind == "auto":
        kind = resolve_clock(kind, str(device), torch.get_num_threads())
    if kind == "wall":
        return WallClock(device)
    if kind != "cpu":
        raise EcoSimError(f"--clock must be one of {', '.join(CLOCKS)}, got {kind!r}")
    if torch.device(device).type != "cpu":
        raise EcoSimError("--clock cpu measures CPU time: only for --device cpu (a GPU's time is wall time)")
    if torch.get_num_threads() != 1:
        raise EcoSimError("--clock cpu counts the calling thread only: use it with --threads 1")
    return ThreadClock()


class FakeClock:
    """A clock that only moves when told to (`advance`)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += float(seconds)
