"""When requests reach the event engine's server (`--arrivals`): one after another, all at once,
Poisson, from a file of arrival seconds, or from N clients that each send their next request when
the last one ends (`concurrency:N`: how users benchmark a server, and what their per-request
tokens/s and inter-token latency are measured under)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ecosim import gate
from ecosim.errors import EcoSimError
from ecosim.gate.profiles import ARRIVALS
from ecosim.gate.values import ascii_int


def clients(arrivals: str) -> int | None:
    """N of `concurrency:N` (ASCII decimal, at least 1); None for any other arrivals."""
    if not arrivals.startswith("concurrency:"):
        return None
    return ascii_int(arrivals.split(":", 1)[1], f"--arrivals {arrivals!r}: the number of clients", lo=1, hi=1 << 20)


def arrival_times(text: str, n: int, seed: int) -> list[float] | None:
    """Arrival time of each request; None means each arrives when the previous one finishes."""
    if text == "sequential":
        return None
    if text == "together":
        return [0.0] * n
    if clients(text) == 1:  # one client: each request sent when the previous one ends
        return None
    if text.startswith("poisson:"):
        try:
            rate = float(text.split(":", 1)[1])
        except ValueError:
            rate = -1.0
        if not np.isfinite(rate) or rate <= 0:
            raise EcoSimError(f"--arrivals {text!r}: the rate must be a positive number of requests per second")
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
        return np.concatenate([[0.0], np.cumsum(gaps[1:])]).tolist()
    path = Path(text)
    if not path.is_file():
        raise EcoSimError(f"--arrivals {text!r}: expected sequential, together, poisson:RATE, concurrency:N or a JSON file "
                          "of arrival seconds")
    times = gate.load(ARRIVALS, path)  # finite, non-negative seconds (ecosim/gate/profiles.py)
    if len(times) < n:
        raise EcoSimError(f"{path}: {len(times)} arrival times; expected a JSON list of at least {n} (one per request)")
    return [float(t) for t in times[:n]]
