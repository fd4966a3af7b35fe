"""How much of the oracle predictor's gain each real predictor keeps: `ecosim predictor compare`.

Why: recall says how often a predictor names the right experts, not whether `ecospec` then loads
fewer of them per token or runs faster. This replays `ecospec` with each predictor over a lambda
grid against `confidence` at the same budget, under each pricing, and scores the predictors on
the same held-out predictions. Every number, defined once (totals over a *group* of traces: same
model shape, all real or all synthetic; never mixed):

- recall@k: evaluate.py's recall with k = the model's top-k, on every request of each trace, each
  predicted by a model fitted on the trace's other requests (a kind by name is k-fold by request,
  kfold.py; `oracle` is 1.0 by construction). `per_layer` is the same split by MoE layer.
- best lambda of a predictor: the lambda of the grid with the least total time per token (sum of
  time / sum of tokens over the group's traces); ties go to the smaller lambda. One lambda per
  group and pricing, tuned on the traces it is reported on, for every predictor alike.
- gain_s = time_per_token(confidence) - time_per_token(ecospec at its best lambda), seconds per
  token. Never negative when the grid holds 0: ecospec at lambda 0 selects exactly what
  confidence selects (ecosim/policies/ecospec.py).
- kept = gain_s / gain_s of the `oracle` predictor: the fraction of the gain true routing gets that
  this predictor keeps. None (and `note` says so) when the oracle's gain is <= 0: then cost-aware
  selection gains nothing at this budget and pricing, and there is nothing to keep a fraction of.
  It can exceed 1: greedy growth with the true experts is not the best selection, only the usual one.
- experts_change = experts_per_step(ecospec) / experts_per_step(confidence) - 1 (metrics.py's
  experts per step: the union of the verified nodes' true experts, summed over MoE layers);
  likewise tokens_change for tokens per step. experts_per_token = expert loads / tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ecosim.metrics import Row, total
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.predictors import ExpertPredictor, get_predictor
from ecosim.predictors.evaluate import Tally, evaluate_with
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.sweep.grid import Pricing, Settings
from ecosim.trace.io import Trace

PREDICTORS = ("freq", "token", "context", "oracle")


class Given(ExpertPredictor):
    """Predictions already made (by `evaluate_with`), handed to the replay so it does not redo them."""

    def __init__(self, name: str, predicted: np.ndarray):
        self.name, self.predicted = name, predicted

    def predict(self, trace: Trace, only: np.ndarray | None = None) -> np.ndarray:
        return self.predicted


@dataclass(frozen=True)
class Point:
    """ecospec at one lambda: totals over the group's traces."""

    lam: float
    row: Row


@dataclass
class Outcome:
    """One predictor under one pricing."""

    predictor: str
    curve: list[Point]
    best: Point
    gain_s: float
    kept: float | None = None


@dataclass
class PricingResult:
    """Confidence, ar and every predictor's ecospec under one device and placement."""

    pricing: Pricing
    device: str
    hbm_bw: float
    ar: Row
    confidence: Row
    outcomes: list[Outcome]
    oracle_gain_s: float | None = None
    note: str | None = None


@dataclass
class Group:
    """Traces of one model shape, all real or all synthetic, and what was measured on them."""

    model: str
    synthetic: bool
    top_k: int
    traces: list[str]
    recall: dict[str, Tally] = field(default_factory=dict)  # predictor -> totals over the traces
    recall_by_trace: dict[str, dict[str, float | None]] = field(default_factory=dict)  # trace -> predictor -> recall
    described: dict[str, str] = field(default_factory=dict)
    pricings: list[PricingResult] = field(default_factory=list)


def best_point(curve: list[Point]) -> Point:
    """The point of least time per token; ties to the smaller lambda."""
    return min(curve, key=lambda p: (p.row.time_per_token_s, p.lam))


def gains(conf: Row, outcomes: list[Outcome], oracle: str = "oracle") -> tuple[float | None, str | None]:
    """Fill each outcome's `kept` from the oracle predictor's gain; (oracle gain, note)."""
    ref = next((o for o in outcomes if o.predictor == oracle), None)
    if ref is None:
        return None, "no oracle predictor in the comparison: no fraction of its gain"
    if ref.gain_s <= 0:
        return ref.gain_s, (f"the oracle predictor gains nothing over confidence here (best lambda {ref.best.lam:g}): "
                            "cost-aware selection does not pay at this budget and pricing, so no fraction is given")
    for o in outcomes:
        o.kept = o.gain_s / ref.gain_s
    return ref.gain_s, None


def group_key(trace: Trace) -> tuple[str, bool]:
    return trace.model.name, trace.synthetic


def compare(
    traces: list[Trace],
    predictors: list[str],
    budget: int,
    lambdas: list[float],
    pricings: list[Pricing],
    settings: Settings = Settings(),
    score: str = "difference",
    folds: int = 4,
    replay: bool = True,
    progress: Callable[[str], None] | None = None,
) -> list[Group]:
    """Recall of each predictor and, when `replay`, its ecospec at the best lambda against confidence.

    Traces are processed one at a time (a k-fold predictor fits once per trace and is used for both
    the recall and the replay); results are totalled per group (`group_key`).
    """
    lambdas = sorted(set(lambdas))
    groups: dict[tuple[str, bool], Group] = {}
    rows: dict[tuple[tuple[str, bool], int, str, float], list[Row]] = {}  # (group, pricing, policy/predictor, lam)
    preds = {name: get_predictor(name, folds=folds) for name in predictors}
    for trace in traces:
        key = group_key(trace)
        g = groups.setdefault(key, Group(trace.model.name, trace.synthetic, trace.model.top_k, []))
        g.traces.append(trace.name)
        given: dict[str, ExpertPredictor] = {}
        everything = np.ones(len(trace.nodes["node"]), dtype=bool)
        for name, pred in preds.items():
            if progress:
                progress(f"{trace.name}: {name} predictions")
            tally, predicted = evaluate_with(pred, trace, everything)
            g.described[name] = pred.describe()
            if name in g.recall:
                g.recall[name].merge(tally)
            else:
                g.recall[name] = tally
            g.recall_by_trace.setdefault(trace.name, {})[name] = tally.report()["recall"]
            if predicted is not None:
                given[name] = Given(name, predicted)
        if not replay:
            continue
        r = TraceReplay(trace, predictors=given)
        costs = [cost_model(trace, settings.device(p), parse_placement(p.placement), settings.cost) for p in pricings]
        for i, cost in enumerate(costs):
            rows.setdefault((key, i, "ar", 0.0), []).append(r.run(PolicySpec("ar"), cost))
            rows.setdefault((key, i, "confidence", 0.0), []).append(r.run(PolicySpec("confidence", budget), cost))
        for name in predictors:
            if progress:
                progress(f"{trace.name}: ecospec with {name}, {len(lambdas)} lambdas")
            for lam in lambdas:
                spec = PolicySpec("ecospec", budget, lam, name, score)  # type: ignore[arg-type]
                for i, cost in enumerate(costs):
                    rows.setdefault((key, i, name, lam), []).append(r.run(spec, cost))
    if replay:
        for key, g in groups.items():
            for i, p in enumerate(pricings):
                dev = settings.device(p)
                conf = total(rows[(key, i, "confidence", 0.0)])
                outcomes = []
                for name in predictors:
                    curve = [Point(lam, total(rows[(key, i, name, lam)])) for lam in lambdas]
                    best = best_point(curve)
                    outcomes.append(Outcome(name, curve, best, conf.time_per_token_s - best.row.time_per_token_s))
                res = PricingResult(p, dev.name, dev.hbm_bw, total(rows[(key, i, "ar", 0.0)]), conf, outcomes)
                res.oracle_gain_s, res.note = gains(conf, outcomes)
                g.pricings.append(res)
    return list(groups.values())


def _row(row: Row) -> dict[str, Any]:
    d = row.to_dict()
    d["experts_per_token"] = row.expert_loads / row.tokens if row.tokens else 0.0
    for k in ("trace", "speedup_vs_ar", "oracle_fraction"):
        d.pop(k)
    return d


def _change(a: float, b: float) -> float | None:
    return b / a - 1.0 if a else None


def to_dict(groups: list[Group], budget: int, lambdas: list[float], score: str, folds: int) -> dict[str, Any]:
    """The JSON document `ecosim predictor compare --json` prints (schema: tests/test_predictors.py)."""
    out: dict[str, Any] = {"budget": budget, "lambdas": sorted(set(lambdas)), "score": score, "folds": folds,
                           "definitions": "ecosim/analysis/predictor_compare.py", "groups": []}
    for g in groups:
        doc: dict[str, Any] = {
            "model": g.model, "synthetic": g.synthetic, "top_k": g.top_k, "traces": g.traces,
            "predictors": {name: {"described": g.described[name], **t.report(), "by_trace": {
                tr: g.recall_by_trace[tr][name] for tr in g.traces}} for name, t in g.recall.items()},
            "pricings": [],
        }
        for p in g.pricings:
            conf, ar = p.confidence, p.ar
            doc["pricings"].append({
                "hardware": p.pricing.hardware, "device": p.device, "hbm_bw": p.hbm_bw, "placement": p.pricing.placement,
                "ar": _row(ar), "confidence": _row(conf), "oracle_gain_s": p.oracle_gain_s, "note": p.note,
                "ecospec": [{
                    "predictor": o.predictor, "best_lambda": o.best.lam, "best": _row(o.best.row),
                    "gain_s": o.gain_s, "kept": o.kept,
                    "experts_change": _change(conf.experts_per_step, o.best.row.experts_per_step),
                    "tokens_change": _change(conf.tokens_per_step, o.best.row.tokens_per_step),
                    "speedup_vs_confidence": conf.time_per_token_s / o.best.row.time_per_token_s if o.best.row.time_s else None,
                    "curve": [{"lambda": pt.lam, **{k: v for k, v in _row(pt.row).items() if k in CURVE}} for pt in o.curve],
                } for o in p.outcomes],
            })
        out["groups"].append(doc)
    return out


CURVE = ("tokens_per_step", "experts_per_step", "experts_per_token", "time_per_token_s")


# ------------------------------------------------------------------------------ tables of a document


def pricing_label(p: dict[str, Any]) -> str:
    return f"{p['hardware']} {p['hbm_bw'] / 1e12:.3g} TB/s, {p['placement']}"


def group_label(grp: dict[str, Any]) -> str:
    return f"{'synthetic' if grp['synthetic'] else 'real'} {grp['model']} ({', '.join(grp['traces'])})"


def markdown_table(title: str, head: list[str], rows: list[list[str]]) -> str:
    lines = [f"{title}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _arrow(a: float, b: float, spec: str, change: float | None = None) -> str:
    return f"{a:{spec}} → {b:{spec}}" + (f" ({change:+.1%})" if change is not None else "")


def summary_tables(doc: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the recall table and of one ecospec table per replayed group."""
    groups = doc["groups"]
    names = list(groups[0]["predictors"]) if groups else []
    head = ["predictor"]
    for grp in groups:
        head += [f"recall@{grp['top_k']}, {group_label(grp)}", "µs/candidate"]
    rows = []
    for n in names:
        row = [n]
        for grp in groups:
            r = grp["predictors"][n]
            row += [_fmt(r["recall"], ".3f"), _fmt(r["us_per_candidate"], ".1f")]
        rows.append(row)
    tables = [(f"Recall@k of each predictor, every request predicted by a model fitted on the trace's other requests "
               f"({doc['folds']}-fold by request)", head, rows)]
    lam = doc["lambdas"]
    grid = f"{lam[0]:g}..{lam[-1]:g}, {len(lam)} values" if len(lam) > 1 else f"{lam[0]:g}"
    for grp in groups:
        if not grp["pricings"]:
            continue
        head = ["pricing", "predictor", "best λ", "experts/step (confidence → ecospec)",
                "tokens/step", "experts/token", "µs/token", "kept of oracle's gain"]
        rows = []
        for p in grp["pricings"]:
            c = p["confidence"]
            for e in p["ecospec"]:
                b = e["best"]
                kept = _fmt(e["kept"], ".2f") if p["oracle_gain_s"] is None or p["oracle_gain_s"] > 0 else "oracle gains 0"
                rows.append([pricing_label(p), e["predictor"], f"{e['best_lambda']:g}",
                             _arrow(c["experts_per_step"], b["experts_per_step"], ".1f", e["experts_change"]),
                             _arrow(c["tokens_per_step"], b["tokens_per_step"], ".2f", e["tokens_change"]),
                             _arrow(c["experts_per_token"], b["experts_per_token"], ".1f"),
                             _arrow(c["time_per_token_s"] * 1e6, b["time_per_token_s"] * 1e6, ".2f"), kept])
        tables.append((f"ecospec at each predictor's best λ (grid {grid}, score {doc['score']}) against confidence, "
                       f"budget {doc['budget']}, {group_label(grp)}", head, rows))
    return tables


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)
