"""The verdict under a replay: which policy is fastest over the traces, by how much, and, when
speculation loses, why in numbers.

A reader who runs `ecosim replay` wants one answer: does speculation pay here, and if not, what
eats it. Per step, speculation pays when

    t_spec(T) < T * t_plain                                   (tokens/step T, seconds per step t)

where a speculative step's time is its draft side (tree_depth draft forwards plus the engine's
bookkeeping: CostModel.draft_time, spec_bookkeeping_time) plus verifying its tree. So the reason
is given as the plain step's time, the draft side's (forwards and bookkeeping apart) in plain
steps, and what the best speculative tree's T tokens would buy back: (T - 1) plain steps.

Everything here is computed from the rows `simulate.compare` returns and the cost models that
priced them; nothing is re-replayed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ecosim.cost import CostModel
from ecosim.metrics import Row
from ecosim.readings import Reading, readings
from ecosim.simulate import AR, PolicyResult

LEVEL = 1e-3  # policies within 0.1% of the fastest are level with it (a tie, not a margin)

# The question at the paper's scale: a synthetic DeepSeek-V3.1 trace (calibrated routing preset, its
# MTP draft) on 8 H200s under tensor parallelism. Seconds to run on a laptop.
PAPER_SCALE = ("ecosim synth dsv31-synthetic --model deepseek-v3.1 --requests 4 --positions 64 --seed 0 --force && "
               "ecosim replay dsv31-synthetic --hardware h200 --placement tp:8")
PAPER_MODELS = ("deepseek-v3.1", "qwen3-235b-a22b", "gpt-oss-120b")  # the paper's three targets


@dataclass
class Entry:
    """One policy's total over the traces, as the verdict names it."""

    policy: str
    label: str
    speculative: bool
    time_per_token_s: float
    tokens_per_step: float
    speedup_vs_ar: float

    @classmethod
    def of(cls, spec_name: str, label: str, speculative: bool, row: Row, ar_time: float) -> Entry:
        t = row.time_per_token_s
        return cls(spec_name, label, speculative, t, row.tokens_per_step, ar_time / t if t else 0.0)


@dataclass
class Why:
    """Per step, the terms that decide whether speculation pays (seconds; means over the traces,
    weighted by the steps of the policy named)."""

    policy: str  # the best speculative policy, whose tree is weighed
    plain_step_s: float  # ar's step: one token
    draft_levels: float  # draft forwards per step, as the policy drafts them (DRAFTING_RULE)
    draft_forwards_s: float  # those forwards' seconds
    bookkeeping_s: float  # the engine's speculative bookkeeping per step
    level_s: float  # of it, per draft level: the serving profile's fitted latency (spec_level_s)
    draft_side_s: float  # forwards + bookkeeping (or --draft-time where given)
    step_s: float  # the policy's mean step: draft side + verifying its tree
    tokens_per_step: float
    break_even_s: float  # T x plain step: what its step must cost to tie ar
    overridden: bool = False  # --draft-time replaced the forwards and bookkeeping


@dataclass
class Verdict:
    traces: int
    fastest: Entry
    level: list[Entry]  # within LEVEL of the fastest
    runner_up: Entry | None  # the fastest of the rest
    margin: float | None  # runner_up's time / fastest's time
    speculation_pays: bool  # a speculative policy that drafts beats ar by more than LEVEL
    best_speculative: Entry | None
    why: Why | None  # when speculation loses
    paper_scale: str | None  # the command that asks the question at the paper's scale
    readings: list[Reading] = field(default_factory=list)  # the paper's speedup read two ways, per paper-shape trace
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _mean(values: list[float], weights: list[float]) -> float:
    w = sum(weights)
    return sum(v * x for v, x in zip(values, weights)) / w if w else 0.0


def _why(best: PolicyResult, costs: list[CostModel], plain_step: float) -> Why:
    """The terms of the policy's own steps: its draft side as it was priced (each step's own draft
    steps, DRAFTING_RULE: a policy that drafts fewer than the setting's N pays for fewer), split into
    draft forwards and bookkeeping, per step over all its steps."""
    t = best.total
    n = float(t.steps) or 1.0
    overridden = any(c.terms.draft_time_s is not None for c in costs)
    drafted = [c.draft is not None and not overridden and not c.experts_only for c in costs]
    forwards = sum(r.draft_levels * c.draft_forward_time() for r, c, d in zip(best.rows, costs, drafted) if d)
    levels = sum(r.draft_levels for r, d in zip(best.rows, drafted) if d)
    side = t.draft_s / n
    books = max(side - forwards / n, 0.0) if any(drafted) else 0.0
    steps = [float(r.steps) for r in best.rows]
    level = _mean([c.terms.spec_level_s if d else 0.0 for c, d in zip(costs, drafted)], steps)
    step = t.time_s / t.steps if t.steps else 0.0
    return Why(best.spec.label(), plain_step, levels / n, forwards / n, books, level, side, step,
               t.tokens_per_step, t.tokens_per_step * plain_step, overridden)


def verdict(results: list[PolicyResult], costs: list[CostModel], models: list[str]) -> Verdict:
    """The verdict over `results` (totals over the traces; bounds left out: the oracle is not a
    policy one can run). `costs` are the traces' cost models, `models` their shapes' names."""
    run = [r for r in results if not r.spec.policy.is_bound]
    if not run:
        run = results
    first = run[0].total
    ar_time = first.time_per_token_s * (first.speedup_vs_ar or 1.0)  # ar is replayed whether or not it is listed
    entries = [Entry.of(r.spec.name, r.spec.label(), r.spec.speculative, r.total, ar_time) for r in run]
    if not any(r.spec == AR for r in run):
        entries.append(Entry(AR.name, AR.label(), False, ar_time, 1.0, 1.0))
    entries.sort(key=lambda e: e.time_per_token_s)
    fastest = entries[0]
    level = [e for e in entries[1:] if e.time_per_token_s <= fastest.time_per_token_s * (1 + LEVEL)]
    rest = entries[1 + len(level):]
    runner_up = rest[0] if rest else None
    margin = runner_up.time_per_token_s / fastest.time_per_token_s if runner_up and fastest.time_per_token_s else None
    drafting = [e for e in entries if e.speculative and e.tokens_per_step > 1.0]
    best = drafting[0] if drafting else None
    pays = best is not None and best.time_per_token_s * (1 + LEVEL) < ar_time
    why = None
    if best is not None and not pays:
        res = next(r for r in run if r.spec.label() == best.label)
        why = _why(res, costs, ar_time)
    paper = None if models and all(m in PAPER_MODELS for m in models) else PAPER_SCALE
    v = Verdict(len(models), fastest, level, runner_up, margin, pays, best, why, paper, readings(results, models))
    v.lines = lines(v)
    return v


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g} ms"


def _name(e: Entry) -> str:
    return "ar (plain decoding)" if e.policy == AR.name else e.label


def lines(v: Verdict) -> list[str]:
    """The verdict as the few lines `replay` ends with."""
    f = v.fastest
    over = f"over {v.traces} traces" if v.traces > 1 else "on this trace"
    head = f"verdict: fastest {over}: {_name(f)}, {_ms(f.time_per_token_s)}/token"
    if f.policy != AR.name:
        head += f", {f.speedup_vs_ar:.3f}x plain decoding"
    if v.level:
        names = ", ".join(_name(e) + (" (it declines to draft: 1.000 tokens/step)" if e.speculative and e.tokens_per_step <= 1.0 else "")
                          for e in v.level)
        head += f"; level with it (within {LEVEL:.1%}): {names}"
    if v.runner_up is not None and v.margin is not None:
        head += f"; {v.margin:.3f}x faster than the next, {_name(v.runner_up)}"
    out = [head]
    b = v.best_speculative
    if b is None:
        out.append("no policy here drafts a token: speculation was not tried")
    elif v.speculation_pays:
        out.append(f"speculation pays: {_name(b)} runs at {b.speedup_vs_ar:.3f}x plain decoding "
                   f"({b.tokens_per_step:.3f} tokens/step)")
    elif v.why is not None:
        w = v.why
        if w.overridden:
            side = f"{_ms(w.draft_side_s)} on the draft side (--draft-time)"
        else:
            fitted = f", {w.draft_levels:.3g} x {_ms(w.level_s)} of it the profile's per-level latency" if w.level_s else ""
            side = (f"{_ms(w.draft_side_s)} on the draft side ({w.draft_levels:.3g} draft forwards {_ms(w.draft_forwards_s)} "
                    f"+ bookkeeping {_ms(w.bookkeeping_s)}{fitted})")
        ratio = w.draft_side_s / w.plain_step_s if w.plain_step_s else float("inf")
        out.append(f"why speculation loses: a plain step takes {_ms(w.plain_step_s)}; a step of {w.policy} first spends on average {side}: "
                   f"{ratio:.3g} plain steps. It is the best speculative policy here and takes {_ms(w.step_s)} a step for "
                   f"{w.tokens_per_step:.3f} tokens; to tie plain decoding it would need under {w.tokens_per_step:.3f} x "
                   f"{_ms(w.plain_step_s)} = {_ms(w.break_even_s)}")
    out += [r.line() for r in v.readings]
    if v.paper_scale:
        out.append(f"the question at a paper-scale shape (synthetic DeepSeek-V3.1 on 8 H200s): {v.paper_scale}")
    return out
