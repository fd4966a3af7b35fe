"""`--plot FILE` of `tune`, `sweep` and `replay`: one figure of what the command printed.

- tune: speedup over plain decoding against the tree budget (draft tokens verified per step), one
  line per number of draft steps, with `ecospec-auto` and plain decoding as horizontal lines;
- sweep: time per token against tokens per step (acceptance) of every configuration, per pricing,
  with the front (no other configuration is both faster per token and accepts more per step);
- replay: one bar per policy, its speedup over plain decoding over all the traces.

PNG or SVG, by the file's suffix (checked before any work: `check_plot`). matplotlib is imported
only here and only when a plot is asked for; it is in the optional `reports` extra, and its absence
is one line saying how to install it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ecosim.errors import EcoSimError

FORMATS = (".png", ".svg")
MISSING = "--plot needs matplotlib, which is not installed; install it with: pip install 'ecosim[reports]'"


def check_plot(path: Path | None) -> None:
    """A plot file's format and folder, and matplotlib itself, before any work is done."""
    if path is None:
        return
    if path.suffix.lower() not in FORMATS:
        raise EcoSimError(f"--plot {path}: the file must end in {' or '.join(FORMATS)} (its format)")
    if not path.parent.is_dir():
        raise EcoSimError(f"--plot {path}: no such folder {path.parent}")
    if path.is_dir():
        raise EcoSimError(f"--plot {path}: a folder, not a file")
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise EcoSimError(MISSING) from None
    return plt


def _save(path: Path, draw: Callable[[Any, Any], None], size: tuple[float, float] = (7.0, 4.2)) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=size)
    try:
        draw(fig, ax)
        fig.tight_layout()
        fig.savefig(path, format=path.suffix.lower()[1:], dpi=120)
    finally:
        plt.close(fig)
    return path


def plot_tune(path: Path, candidates: dict[str, Any], title: str) -> Path:
    """Speedup over `ar` against draft tokens per step, one line per draft steps S (best top-k K per
    point, as the engine would pick); ecospec-auto and plain decoding as horizontal lines."""
    ar = candidates["ar"].time_per_token

    def draw(fig: Any, ax: Any) -> None:
        by_steps: dict[int, dict[int, float]] = {}
        for c in candidates.values():
            s = c.static
            if s is None:
                continue
            best = by_steps.setdefault(s.steps, {})
            best[s.draft_tokens] = max(best.get(s.draft_tokens, 0.0), ar / c.time_per_token)
        for steps in sorted(by_steps):
            pts = sorted(by_steps[steps].items())
            ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=f"static, {steps} step{'s' * (steps > 1)}")
        adaptive = [c for k, c in candidates.items() if c.static is None and k != "ar"]  # ecospec-auto, one per steps
        if adaptive:
            auto = min(adaptive, key=lambda c: c.time_per_token)
            ax.axhline(ar / auto.time_per_token, color="black", linestyle="--", label=f"{auto.name} (its best steps)")
        ax.axhline(1.0, color="grey", linestyle=":", label="plain decoding (ar)")
        ax.set_xlabel("draft tokens verified per step (--speculative-num-draft-tokens)")
        ax.set_ylabel("speedup over plain decoding")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)

    return _save(path, draw)


def plot_replay(path: Path, labels: list[str], speedups: list[float], title: str) -> Path:
    """One bar per policy: its speedup over `ar`, totals over the traces."""

    def draw(fig: Any, ax: Any) -> None:
        ax.bar(range(len(labels)), speedups, color=["grey" if abs(s - 1) < 1e-12 else "tab:blue" for s in speedups])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("speedup over plain decoding")
        ax.set_title(title, fontsize=10)

    return _save(path, draw, (max(6.0, 0.7 * len(labels) + 2), 4.5))


def plot_sweep(path: Path, groups: list[dict[str, Any]], pricing: Callable[[dict[str, Any]], str]) -> Path:
    """Time per token against tokens per step of every configuration's totals (the bound excluded),
    one colour per pricing; the front of each pricing drawn as a line."""

    def draw(fig: Any, ax: Any) -> None:
        by: dict[str, list[tuple[float, float]]] = {}
        for g in groups:
            by.setdefault(pricing(g), []).append((g["total"].tokens_per_step, g["total"].time_per_token_s * 1e3))
        for name, pts in by.items():
            dots = ax.scatter([x for x, _ in pts], [y for _, y in pts], s=12, alpha=0.5)
            front, best = [], float("inf")
            for x, y in sorted(pts, key=lambda p: (-p[0], p[1])):  # most tokens per step first
                if y < best:
                    best = y
                    front.append((x, y))
            front.sort()
            ax.plot([x for x, _ in front], [y for _, y in front], marker="o", color=dots.get_facecolor()[0][:3], label=f"{name} front")
        ax.set_xlabel("tokens per step (acceptance)")
        ax.set_ylabel("ms per token")
        ax.set_title("sweep: time per token against acceptance (totals over the traces)", fontsize=10)
        ax.legend(fontsize=8)

    return _save(path, draw)
