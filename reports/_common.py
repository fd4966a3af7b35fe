"""Shared by the report notebooks: figure style, saving, and labelling real, hybrid and synthetic data."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # the kernel's inline backend embeds each figure in the HTML

import ecosim
from ecosim import Trace

plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "figure.figsize": (7.5, 4.5)})


def save(fig, out: str | Path, name: str) -> Path:
    """Save a figure as PNG beside the HTML (and keep it displayed inline)."""
    path = Path(out) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path


def load_traces(root: str | Path) -> list[Trace]:
    return [ecosim.read_trace(p) for p in ecosim.find_traces([str(root)])]


def real_or_all(root: str | Path) -> tuple[list[Trace], str]:
    """The real traces under `root`, or every trace when none is real; and which it was (the
    traces' provenance, hybrid or synthetic, or `mixed` when they differ)."""
    traces = load_traces(root)
    real = [t for t in traces if t.provenance == "real"]
    kinds = {t.provenance for t in traces}
    return (real, "real") if real else (traces, kinds.pop() if len(kinds) == 1 else "mixed")


def kind(trace: Trace) -> str:
    """real, hybrid or synthetic, as the trace reader gives it."""
    return trace.provenance


def task_of(trace: Trace) -> str:
    tasks = sorted({r["task"] for r in trace.manifest["requests"]})
    return tasks[0] if len(tasks) == 1 else "+".join(tasks)
