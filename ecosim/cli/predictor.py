"""`ecosim predictor train | eval | compare`: expert predictors for `ecospec`.

The metrics `eval` prints are defined once, in ecosim/predictors/evaluate.py; those of `compare`
(best lambda, gain, the fraction of the oracle's gain kept) in ecosim/analysis/predictor_compare.py.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ecosim.analysis.predictor_compare import compare, group_label, markdown_table, pricing_label, summary_tables, to_dict
from ecosim.cli import app, fail, joined, make_app, wide_console
from ecosim.outputs import PREDICTOR, check_output
from ecosim.cli.options import DEVICE_NAMES, PLACEMENT_HELP, cost_config, cost_options, used_lines, used_terms
from ecosim.predictors import BUILTIN, KINDS, ExpertPredictor, ScoringPredictor, Selection, get_predictor
from ecosim.predictors.evaluate import Tally, evaluate
from ecosim.predictors.view import draft_view, fingerprint, request_ids, request_mask
from ecosim.catalog.models import get_model
from ecosim.routing.data import as_trace, is_routing_dir, read_routing
from ecosim.trace.io import Trace, find_traces, read_trace

predictor_app = make_app("predictor", "Train and evaluate expert predictors (what `ecospec` scores candidates with).")
app.add_typer(predictor_app, name="predictor")

TraceArgs = Annotated[list[Path], typer.Argument(help="Trace directories, or directories holding traces.")]
TopK = Annotated[int | None, typer.Option("--k", min=1, help="Predicted set = the k best-scored experts per layer (default: the model's top-k).")]
Mass = Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Predicted set = the fewest experts holding this share of the score per layer (instead of --k).")]
MaxSize = Annotated[int | None, typer.Option(min=1, help="With --mass: at most this many experts per layer.")]


def _selection(k: int | None, mass: float | None, max_size: int | None) -> Selection | None:
    if max_size is not None and mass is None:
        fail("--max-size goes with --mass")
    if k is None and mass is None:
        return None
    return Selection(k, mass, max_size)


def _read(paths: list[Path]) -> list[Trace]:
    """Traces; a routing set (import-routing output) is read as one-candidate trees (routing/data.py
    `as_trace`: each next token predicted from its token), its model the catalogue shape named in it."""
    out: list[Trace] = []
    for p in paths:
        if is_routing_dir(p):
            r = read_routing(p)
            out.append(as_trace(r, get_model(r.model), p))
        else:
            out.extend(read_trace(q) for q in find_traces([str(p)]))
    return out


@predictor_app.command("train")
def train_cmd(
    traces: TraceArgs,
    kind: Annotated[str, typer.Option(help=f"What to train: {', '.join(KINDS)} (see ecosim/predictors/).")],
    out: Annotated[Path, typer.Option(help="Predictor file to write (.npz; numpy arrays and a JSON header, no pickle).")],
    holdout: Annotated[float, typer.Option(min=0.0, max=0.95, help="Share of (trace, request) pairs held out of training, drawn with --seed; recorded in the file for `eval`.")] = 0.25,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the request split and of the context model's training.")] = 0,
    k: TopK = None,
    mass: Mass = None,
    max_size: MaxSize = None,
    alpha: Annotated[float, typer.Option(min=0.0, help="token/context: strength of the back-off to the layer prior (pseudo-occurrences).")] = 1.0,
    width: Annotated[int | None, typer.Option(min=1, help="token/context: experts kept per (token, layer) in the table (default 2 x top-k).")] = None,
    dim: Annotated[int, typer.Option(min=1, help="context: embedding size of the token and parent token.")] = 16,
    epochs: Annotated[int, typer.Option(min=1, help="context: passes over the training rows.")] = 3,
    batch: Annotated[int, typer.Option(min=1, help="context: rows per minibatch.")] = 512,
    lr: Annotated[float, typer.Option(min=0.0, help="context: Adam learning rate.")] = 0.03,
    max_rows: Annotated[int, typer.Option(min=1, help="context: train on at most this many rows (a seeded sample).")] = 100_000,
    folds: Annotated[int, typer.Option(min=2, help="context: folds of training requests its token feature is cross-fitted over.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the summary line.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a predictor file already at --out (any other file is never replaced).")] = False,
) -> None:
    """Train a predictor on traces, holding out whole requests for `ecosim predictor eval`."""
    from ecosim.predictors.store import save
    from ecosim.predictors.train import train

    if kind not in KINDS:
        fail(f"unknown predictor kind {kind!r}; known: {', '.join(KINDS)}")
    check_output(out, PREDICTOR, force=force)
    selection = _selection(k, mass, max_size) or Selection()
    loaded = _read(traces)
    options: dict[str, Any] = {"alpha": alpha, "width": width}
    if kind == "context":
        options.update(dim=dim, epochs=epochs, batch=batch, lr=lr, max_rows=max_rows, folds=folds, verbose=not as_json)
    pred, record = train(loaded, kind, holdout, seed, selection, **options)
    path = save(out, pred, record)
    size = path.stat().st_size
    held = sum(len(t["heldout_requests"]) for t in record["traces"])
    trained = sum(len(t["train_requests"]) for t in record["traces"])
    if as_json:
        print(json.dumps({"file": str(path), "kind": kind, "bytes": size, "selection": pred.selection.to_dict(),
                          "training": record, "config": pred.config()}, indent=1))  # type: ignore[attr-defined]
        return
    print(f"{path}: {kind} predictor ({pred.selection.describe(pred.shape.top_k)}), {record['rows']} rows of {trained} "
          f"requests in {len(loaded)} trace(s), {held} request(s) held out, {record['seconds']:.1f} s, {size / 1e6:.2f} MB")


def _masks(pred: ExpertPredictor, split_from: ScoringPredictor | None, trace: Trace, all_requests: bool,
           unheld_in_sample: bool = False) -> tuple[list[int], str]:
    """Requests of `trace` to evaluate on, and how they were chosen: no request (split "none held
    out") for a trace the split trained on whole, unless `unheld_in_sample` scores it in-sample."""
    reqs = request_ids(trace)
    on_the_fly = not isinstance(pred, ScoringPredictor) and pred.name in KINDS
    if all_requests:
        return reqs, "leave-requests-out" if on_the_fly else "all requests"
    if on_the_fly and split_from is None:
        return reqs, "leave-requests-out"
    if split_from is not None and split_from.training:
        fp = fingerprint(trace)
        mine = [t for t in split_from.training.get("traces", []) if t.get("fingerprint") == fp]
        if mine:
            held = sorted({r for t in mine for r in t["heldout_requests"]} - {r for t in mine for r in t["train_requests"]})
            if not held:
                return (reqs, IN_SAMPLE) if unheld_in_sample else ([], NONE_HELD)
            return held, "held out, leave-requests-out" if on_the_fly else "held out"
        return reqs, "not in training"
    return reqs, "leave-requests-out" if on_the_fly else "all requests"


NONE_HELD = "none held out"
IN_SAMPLE = "none held out: all requests, in-sample"


@predictor_app.command("eval")
def eval_cmd(
    predictor: Annotated[str, typer.Argument(help=f"A predictor file, or {', '.join(BUILTIN)} (bounds), or {', '.join(KINDS)} (trained on the fly, leave-requests-out).")],
    traces: TraceArgs,
    split_from: Annotated[Path | None, typer.Option(help="Evaluate on the requests this predictor file held out (default: PREDICTOR's own, if a file).")] = None,
    all_requests: Annotated[bool, typer.Option(help="Evaluate on every request, including ones the predictor was trained on (in-sample; says so).")] = False,
    unheld_in_sample: Annotated[bool, typer.Option("--unheld-in-sample", help="Score a trace the predictor held out no request of on all its requests (in-sample; its split says so) instead of skipping it.")] = False,
    k: TopK = None,
    mass: Mass = None,
    max_size: MaxSize = None,
    folds: Annotated[int, typer.Option(min=2, help="For freq/token/context by name: folds of requests (each predicted by the others' model).")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (with per-layer figures) instead of the table.")] = False,
) -> None:
    """Recall, precision and marginal-cost error of a predictor on requests it was not trained on.

    Metrics are defined in ecosim/predictors/evaluate.py. A file predictor is scored on the requests
    it held out of the traces it was trained on, and on every request of traces it never saw; a
    trace it held out no request of is skipped, named in one line (--unheld-in-sample: scored in-sample).
    """
    from ecosim.predictors.store import load

    selection = _selection(k, mass, max_size)
    pred = get_predictor(predictor, selection=selection, folds=folds)
    source = load(split_from) if split_from is not None else (pred if isinstance(pred, ScoringPredictor) else None)
    loaded = _read(traces)
    per: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    total: Tally | None = None
    for trace in loaded:
        reqs, how = _masks(pred, source, trace, all_requests, unheld_in_sample)
        if not reqs:
            skipped.append({"trace": trace.name, "path": str(trace.path), "split": how})
            continue
        tally = evaluate(pred, trace, request_mask(trace, reqs))
        if total is None:
            total = Tally(tally.layers, tally.top_k)
        if (total.layers, total.top_k) == (tally.layers, tally.top_k):
            total.merge(tally)
        per.append({"trace": trace.name, "path": str(trace.path), "synthetic": trace.synthetic,
                    "provenance": trace.provenance, "requests": reqs,
                    "split": how, "nodes_per_tree": round(draft_view(trace).n_rows / max(trace.n_trees, 1), 2),
                    **tally.report()})
    if total is None:
        fail(f"{(source.source if source else None) or predictor} holds out no request of {', '.join(s['trace'] for s in skipped)} "
             "(trained on all of it); evaluate on other traces, or pass --unheld-in-sample to score in-sample")
    desc = pred.describe()
    sel = pred.selection.to_dict() if isinstance(pred, ScoringPredictor) else None
    out = {"predictor": desc, "name": predictor, "selection": sel, "traces": per, "skipped": skipped, "total": total.report()}
    note = _skipped_line(skipped, (source.source if source else None) or predictor)
    if as_json:
        if note:
            print(note, file=sys.stderr)
        print(json.dumps(out, indent=1))
        return
    _print_table(out, note)


def _skipped_line(skipped: list[dict[str, str]], source: str) -> str:
    """One line naming the traces `source` trained on whole (no request held out), which eval skips."""
    if not skipped:
        return ""
    names = ", ".join(s["trace"] for s in skipped)
    return (f"skipped {len(skipped)} trace(s) {source} held out no request of (trained on all of them): {names}; "
            "--unheld-in-sample scores them in-sample")


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _print_table(out: dict[str, Any], note: str = "") -> None:
    t = Table(title=f"predictor {out['predictor']}", title_justify="left")
    for col in ("trace", "data", "requests", "split", "candidates", "recall", "precision", "set size",
                "marginal true", "predicted", "MAE", "corr", "µs/candidate", "cpu µs"):
        t.add_column(col, justify="left" if col in ("trace", "data", "requests", "split") else "right")
    rows = [*out["traces"], {"trace": "total", **out["total"]}] if len(out["traces"]) > 1 else out["traces"]
    for r in rows:
        m = r["marginal"]
        t.add_row(
            r["trace"], r.get("provenance", ("synthetic" if r["synthetic"] else "real")) if "synthetic" in r else "",
            ",".join(map(str, r["requests"])) if "requests" in r else "", r.get("split", ""), str(r["rows"]),
            _fmt(r["recall"], ".4f"), _fmt(r["precision"], ".4f"), _fmt(r["set_size"], ".2f"),
            _fmt(m.get("true_mean"), ".2f"), _fmt(m.get("predicted_mean"), ".2f"), _fmt(m.get("mae"), ".2f"),
            _fmt(m.get("pearson"), ".3f"), _fmt(r["us_per_candidate"], ".2f"), _fmt(r["cpu_us_per_candidate"], ".2f"),
        )
    console = wide_console()
    console.print(t)
    layer = [x for x in out["total"]["per_layer"]["recall"] if x is not None]
    if layer:
        console.print(f"per-layer recall: min {min(layer):.4f}, median {statistics.median(layer):.4f}, max {max(layer):.4f}"
                      f"; by depth: {', '.join(f'{d}: {v:.3f}' for d, v in out['total']['recall_by_depth'].items())}")
    console.print("[dim]marginal = experts a candidate adds to its ancestors' set, summed over MoE layers "
                  "(predicted: against the predicted buffer); definitions in ecosim/predictors/evaluate.py[/dim]")
    if note:
        console.print(note, markup=False, highlight=False)
    if any(r["synthetic"] for r in out["traces"]):
        console.print("[yellow]synthetic traces are generated, not measured: their figures illustrate the model only[/yellow]")


@predictor_app.command("compare")
@cost_options
def compare_cmd(
    traces: TraceArgs,
    predictor: Annotated[list[str], typer.Option("--predictor", help="Predictors, repeatable or a comma list: kinds by name (k-fold by request), oracle, none, or files (in-sample on the requests they were trained on; they warn).")] = ["freq", "token", "context", "oracle"],
    budget: Annotated[int, typer.Option(min=0, help="Nodes a step may verify besides the root, for confidence and ecospec alike.")] = 16,
    lam: Annotated[list[str], typer.Option("--lambda", help="ecospec's lambda grid: values and/or ranges start:stop:step, repeatable or a comma list; include 0 (= confidence). Fine near 0, where the tiny model's best lambdas lie.")] = ["0:0.3:0.025", "0.4:2:0.2"],
    score: Annotated[str, typer.Option(help="ecospec's score: difference or ratio.")] = "difference",
    hardware: Annotated[list[str], typer.Option(help=f"Catalogue devices ({DEVICE_NAMES}) or profile .json files, repeatable or a comma list.")] = ["h200"],
    bw: Annotated[list[str] | None, typer.Option("--bw", help="HBM bandwidths overriding the device's, repeatable or a comma list, e.g. 1TB/s,4.8TB/s.")] = None,
    placement: Annotated[list[str], typer.Option(help=f"{PLACEMENT_HELP} Repeatable or a comma list; offload makes expert reads cost.")] = ["hbm", "offload:8"],
    folds: Annotated[int, typer.Option(min=2, help="Folds of requests for kinds by name (each request predicted by the others' model).")] = 4,
    recall_only: Annotated[list[Path] | None, typer.Option(help="Traces scored for recall only, not replayed (e.g. a large synthetic shape); repeatable.")] = None,
    cost: dict[str, str | None] | None = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the tables as Markdown (what the README's predictor section holds).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (with per-layer recall and each lambda's totals).")] = False,
) -> None:
    """Each predictor's recall@k, and ecospec at its best lambda against confidence at the same budget.

    Reports experts and tokens per step, time per token, and the fraction of the oracle predictor's
    gain (confidence's time per token minus ecospec's) each predictor keeps, per group of traces
    (same shape, real or synthetic) and pricing. Definitions: ecosim/analysis/predictor_compare.py.
    """
    from ecosim.sweep import grid as g

    if markdown and as_json:
        fail("--markdown and --json are alternatives")
    if "," in score:
        fail(f"--score {score!r}: one score, not a list")
    score = g.parse_axis("score", score)[0]
    names = g.parse_axis("predictor", joined(predictor) or "")
    lambdas = g.parse_axis("lambda", joined(lam) or "")
    settings = g.Settings(cost=cost_config(cost))
    pricings = [g.Pricing(h, b, p) for h in g.parse_hardware(joined(hardware) or "") for b in g.parse_bandwidths(joined(bw))
                for p in g.parse_placements(joined(placement) or "")]
    main, extra = _read(traces), _read(recall_only or [])
    say = (lambda m: print(m, file=sys.stderr)) if sys.stderr.isatty() else None
    groups = compare(main, names, budget, lambdas, pricings, settings, score, folds, progress=say)
    if extra:
        groups += compare(extra, names, budget, lambdas, [], settings, score, folds, replay=False, progress=say)
    doc = to_dict(groups, budget, lambdas, score, folds)
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    tables = summary_tables(doc)
    if markdown:
        print("\n\n".join(markdown_table(*t) for t in tables))
        return
    console = wide_console()
    for title, head, rows in tables:
        t = Table(title=title, title_justify="left")
        for i, h in enumerate(head):
            t.add_column(h, justify="left" if i < 2 and not h.startswith("recall") else "right")
        for r in rows:
            t.add_row(*r)
        console.print(t)
    for line in used_lines(used_terms(settings, pricings), settings.cost):
        console.print(line, markup=False, highlight=False)
    for grp in doc["groups"]:
        for p in grp["pricings"]:
            if p["note"]:
                console.print(f"[yellow]{group_label(grp)}, {pricing_label(p)}: {p['note']}[/yellow]")
    if any(grp["synthetic"] for grp in doc["groups"]):
        console.print("[yellow]synthetic traces are generated, not measured: their figures illustrate the model only[/yellow]")
