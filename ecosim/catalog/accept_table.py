"""Published acceptance lengths, for a synthetic trace whose user has none at hand.

A speculative setting's answer moves with its acceptance length (mean tokens per verification step), and most
people asking "is speculation worth it on my model" have no figure of their own. The published measurements table
(data/published.json, every row with its URL and the quote read there) already holds the acceptance lengths that
came with batch-1 runs; this module reads them as a table keyed by (model, draft kind, steps, top-k, draft
tokens), so there is one home for each figure: a row added to the table is a figure `synth` can use.

Sampling lowers acceptance (ecosim/sampling.py), so a figure is keyed by the temperature its source decoded at too
(the row's `temperature`, 0 when absent): a greedy trace takes a greedy figure (where none is published, the one
measured at the lowest sampling temperature, said to be a lower bound), a trace sampled at T only one measured at T.

`lookup` prefers the same model, then the same family (same architecture and router), and says which it took;
`choose` picks the setting the user's tree asks for, else the largest tree measured (the trace is then recorded
with that setting's shape, so the figure is matched on the tree it was measured on).

Acceptance saturates with the draft's steps: each level is accepted less often than the one above it. Where one
source published a chain's acceptance at three or more step counts, `falloff` fits that curve with a first-level
acceptance a and a per-level factor r (level d accepted, given its parent was, with probability a r^(d-1)), so

    accepted length at S steps = 1 + sum over i = 1..S of a^i r^(i (i - 1) / 2)

and `synth` grows its trees with that falloff: one trace then accepts, at each step count it is cut to, what the
curve says (TensorRT-LLM's DeepSeek-R1 MTP curve, 1.92 to 3.01 over 1 to 5 steps, is fitted within 0.04).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from ecosim.catalog.models import MODELS, ModelShape
from ecosim.fidelity_sampled import temperature as row_temperature

PUBLISHED = Path(__file__).parent / "data" / "published.json"


@dataclass(frozen=True)
class Acceptance:
    model: str  # catalogue shape the row's setting is simulated on
    draft: str  # draft kind (synth_draft.DRAFTS)
    steps: int
    topk: int
    draft_tokens: int
    accept_len: float
    row: str  # published.json row id
    url: str
    temperature: float = 0.0  # the sampling temperature it was measured at (0: greedy)

    def describe(self) -> str:
        at = f" at T={self.temperature:g}" if self.temperature > 0 else ""
        return (f"{self.accept_len:g} tokens/step{at}, published for {self.model} + {self.draft} at {self.steps} steps, "
                f"top-k {self.topk}, {self.draft_tokens} draft tokens (row {self.row}: {self.url})")


@cache
def table(path: Path = PUBLISHED) -> tuple[Acceptance, ...]:
    """Every distinct published (model, draft, setting, acceptance length) a simulated row carries."""
    rows = json.loads(path.read_text())["rows"]
    seen: dict[tuple, Acceptance] = {}
    for r in rows:
        sim, steps, n = r.get("sim") or {}, r.get("num_steps"), r.get("num_draft_tokens")
        acc = sim.get("accept_len") or r.get("accept_len")
        if not acc or sim.get("model") not in MODELS or not sim.get("draft") or not steps or not n:
            continue
        e = Acceptance(sim["model"], sim["draft"], int(steps), int(sim.get("topk") or r.get("topk") or 1), int(n),
                       float(acc), r["id"], r.get("url") or "", row_temperature(r))
        seen.setdefault((e.model, e.draft, e.steps, e.topk, e.draft_tokens, e.accept_len, e.url, e.temperature), e)
    return tuple(seen.values())


def lookup(shape: ModelShape, draft: str, temperature: float = 0.0) -> tuple[list[Acceptance], str]:
    """The published figures of `draft` measured at `temperature` on this shape's model, else on its family; and
    which it was."""
    found, whence = _at(shape, draft, temperature)
    if found or temperature > 0:
        return found, whence
    # greedy, with nothing measured greedy: a figure measured while sampling is a lower bound (sampling lowers
    # acceptance), taken at the lowest temperature published and said so
    sampled = sorted({e.temperature for e in table() if e.draft == draft and e.temperature > 0})
    for t in sampled:
        found, whence = _at(shape, draft, t)
        if found:
            return found, f"{whence}; measured while sampling at T={t:g}: a lower bound for greedy decoding"
    return [], ""


def _at(shape: ModelShape, draft: str, temperature: float) -> tuple[list[Acceptance], str]:
    at = [e for e in table() if e.draft == draft and e.temperature == temperature]
    same = [e for e in at if e.model == shape.name]
    if same:
        return same, f"measured on {shape.name}"
    family = [e for e in at if MODELS[e.model].family == shape.family]
    return family, (f"measured on {family[0].model}, the nearest model of the {shape.family} family" if family else "")


def choose(entries: list[Acceptance], depth: int | None, topk: int | None) -> Acceptance | None:
    """The figure measured at the user's (depth, top-k) where one was, else the one measured on the largest tree."""
    if not entries:
        return None
    match = [e for e in entries if (depth is None or e.steps == depth) and (topk is None or e.topk == topk)]
    pool = match or entries
    return max(pool, key=lambda e: (e.draft_tokens, e.steps, e.topk, e.accept_len))


@dataclass(frozen=True)
class Falloff:
    """A published chain's acceptance over its step counts, fitted (module docstring)."""

    first: float  # a: the first level's acceptance
    decay: float  # r: each level's acceptance over the one above it
    points: tuple[Acceptance, ...]  # the curve's figures, by steps
    error: float  # largest |fitted - published| accepted length over the points

    def describe(self) -> str:
        steps = ", ".join(f"{e.accept_len:g} at {e.steps}" for e in self.points)
        return (f"each draft level accepted {self.decay:.3f}x as often as the one above it (first {self.first:.3f}), "
                f"fitted within {self.error:.2f} tokens/step on {self.points[0].model} + {self.points[0].draft}'s "
                f"published curve ({steps} steps: {self.points[0].url})")


def chain_length(first: float, decay: float, steps: int) -> float:
    """Accepted length of a chain of `steps` whose level d is accepted with probability first * decay^(d-1)."""
    i = np.arange(1, steps + 1, dtype=np.float64)
    return float(1.0 + np.sum(first**i * decay ** (i * (i - 1) / 2)))


def falloff(entries: list[Acceptance]) -> Falloff | None:
    """The per-level falloff of the longest chain curve one source published among `entries` (top-k 1, at least
    three step counts), fitted by least squares on a grid; None where no source published one."""
    curves: dict[str, dict[int, Acceptance]] = {}
    for e in entries:
        if e.topk == 1:
            curves.setdefault(e.url, {}).setdefault(e.steps, e)
    best = max((c for c in curves.values() if len(c) >= 3), key=len, default=None)
    if best is None:
        return None
    points = tuple(best[s] for s in sorted(best))
    steps = np.array([e.steps for e in points])
    want = np.array([e.accept_len for e in points])
    a = np.linspace(0.005, 1.0, 200)[:, None, None]
    r = np.linspace(0.005, 1.0, 200)[None, :, None]  # saturating: a level accepted no more often than its parent
    i = np.arange(1, int(steps.max()) + 1, dtype=np.float64)[None, None, :]
    cum = 1.0 + np.cumsum(a**i * r ** (i * (i - 1) / 2), axis=-1)  # (a, r, S): length at each step count
    err = ((cum[:, :, steps - 1] - want) ** 2).sum(axis=-1)
    ia, ir = np.unravel_index(np.argmin(err), err.shape)
    first, decay = float(a[ia, 0, 0]), float(r[0, ir, 0])
    worst = max(abs(chain_length(first, decay, e.steps) - e.accept_len) for e in points)
    return Falloff(first, decay, points, worst)
