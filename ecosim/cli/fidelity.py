"""`ecosim fidelity`: the step model's predictions next to published measurements."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ecosim.catalog.serving import DEFAULT_SERVING, load_serving, shipped
from ecosim.cli import app, fail, wide_console
from ecosim.catalog.hosts import load_host
from ecosim.fidelity import FREE, PUBLISHED, fitted_profile, load_rows, model_label, run, summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _where(sim: dict[str, Any]) -> str:
    """The placement, with its host and engine profile where experts live in host RAM."""
    where = sim["placement"] + (f" on {sim['host']}" if sim.get("host") else "")
    where += f" ({sim['profile']})" if sim.get("profile") else ""
    return where + (f", {sim['top_k']} experts" if sim.get("top_k") else "") + (f", {sim['tokens']} tokens" if sim.get("tokens") else "")


def _table(results: list[Any]) -> Table:
    t = Table(title="ecosim fidelity: predicted vs published (F = in the fit set, S = summarised separately)",
              title_justify="left")
    for col, just in (("row", "left"), ("", "left"), ("model", "left"), ("hardware", "left"), ("placement", "left"),
                      ("metric", "left"), ("published", "right"), ("predicted", "right"), ("error", "right"),
                      ("LOO", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for x in results:
        r, s = x.row, x.row["sim"]
        t.add_row(r["id"], "F" if r.get("fit") else "S" if r.get("separate") else "", model_label(s) + f" {s['dtype']}", f"{s['hardware']}", _where(s),
                  r["metric"], f"{r['value']:.4g}", f"{x.predicted:.4g}", _pct(x.error), _pct(x.loo_error))
    return t


def _markdown(results: list[Any]) -> str:
    """The rows as a Markdown table, each id linked to its source (the README's table)."""
    out = ["| row | setting | metric | published | predicted | error |", "|---|---|---|---|---|---|"]
    for x in results:
        r, s = x.row, x.row["sim"]
        tag = " (fit)" if r.get("fit") else " (separate)" if r.get("separate") else ""
        out.append(f"| [{r['id']}]({r['url']}){tag} | {model_label(s)} {s['dtype']}, {s['hardware']} {_where(s)} | {r['metric']} "
                   f"| {r['value']:.4g} | {x.predicted:.4g} | {x.error * 100:+.0f}% |")
    return "\n".join(out)


def _summary_lines(s: dict[str, Any]) -> list[str]:
    out = []
    for key, label in (("plain_all", "plain batch-1 decode, every row"), ("plain_held_out", "plain, held-out rows"),
                       ("plain_leave_one_out", "plain, leave-one-out"), ("spec_speedup", "speculative speedup"),
                       ("spec_tok_s", "speculative tok/s"), ("verify_step_ratio", "step time vs tokens"),
                       ("host_plain_held_out", "experts in host memory: plain, held-out rows"),
                       ("host_plain_fit_set", "experts in host memory: plain, fit rows"),
                       ("host_step_ratio", "experts in host memory: step time vs tokens, held-out rows")):
        g = s.get(key, {"rows": 0})
        if not g["rows"]:
            continue
        line = (f"{label}: {g['rows']} rows, median |error| {g['median_abs_error']:.1%}, worst {g['worst_abs_error']:.1%}, "
                f"within 10% {g['within_10pct']}, within 15% {g['within_15pct']}, within 30% {g['within_30pct']}")
        if "sign_right" in g:
            line += f", sign right {g['sign_right']}/{g['rows']}"
        out.append(line)
    for x in s.get("separate", []):
        out.append(f"separate (not in the rows above; why: its `separate` in published.json): {x['id']} {x['metric']} "
                   f"{x['error']:+.1%}")
    return out


@app.command()
def fidelity(
    profile: Annotated[str, typer.Option(help=f"Serving profile whose fixed fields are used ({', '.join(shipped())} or a .json).")] = DEFAULT_SERVING,
    fit: Annotated[bool, typer.Option(help="Fit the profile's free constants (step, kernel, collective, draft-level latency, host sync) on the rows marked fit; --no-fit uses the profile's own values.")] = True,
    table: Annotated[Path | None, typer.Option(help="A published-measurements JSON of the same format; default: the one shipped. A row's sim.model may be a Hugging Face config.json (or its folder) and sim.preset a routing preset, both relative to this file.")] = None,
    write_profile: Annotated[Path | None, typer.Option(help="Write the fitted serving profile to this (new) JSON file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    markdown: Annotated[bool, typer.Option(help="Print the rows as a Markdown table, each linked to its source, then the summary lines.")] = False,
    host: Annotated[str | None, typer.Option(help="Price the rows with experts in host memory on this host (a catalogue host or a host .json) instead of each row's own: a what-if, the fit redone on it.")] = None,
) -> None:
    """Predict every published measurement the simulator can reproduce and report the errors.

    Rows come from catalog/data/published.json (each with its URL). The serving profile's free
    constants are fitted on the declared fit set only; every other row is held out, and the fit
    rows are also predicted leave-one-out.
    """
    if write_profile is not None and write_profile.exists():
        fail(f"{write_profile}: exists; refusing to overwrite it")
    base = load_serving(profile)
    rows = load_rows(table or PUBLISHED)
    if host is not None:
        load_host(host)  # a bad host: one line, before any work
        for r in rows:
            if (r.get("sim") or {}).get("host"):
                r["sim"]["host"] = str(Path(host).resolve()) if Path(host).suffix == ".json" else host
    todo = sum(1 for r in rows if r.get("sim"))
    with Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("predicting", total=todo)
        results, theta, skipped = run(base, fit, rows, progress=lambda _id: bar.advance(task))
    s = summary(results)
    used = dict(zip(FREE, map(float, theta)))
    if write_profile is not None:
        prof = fitted_profile(base, theta, [r["id"] for r in rows if r.get("fit") and not (r.get("sim") or {}).get("profile")])
        write_profile.write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
    if as_json:
        print(json.dumps({
            "profile": base.name, "fitted": fit, "theta": used,
            "engine_profiles": {x.row["sim"]["profile"]: x.terms for x in results if x.terms is not None},
            "rows": [{"id": x.row["id"], "fit": bool(x.row.get("fit")), "metric": x.row["metric"], "published": x.row["value"],
                      "predicted": x.predicted, "error": x.error, "loo_error": x.loo_error,
                      "synthetic_accept_len": x.accept_len,
                      "sim": {k: v for k, v in x.row["sim"].items() if not k.startswith("_")}, "url": x.row["url"],
                      "separate": x.row.get("separate")} for x in results],
            "not_predicted": [{"id": r["id"], "why": r.get("not_predicted"), "url": r["url"]} for r in skipped],
            "summary": s,
        }, indent=1))
        return
    fit_mark = "(fit)" if markdown else "F"  # how each output marks the fit set's rows
    head = (f"profile {base.name}, " + (f"fitted on the {fit_mark} rows: " if fit else "as shipped: ")
            + ", ".join(f"{k} {v * 1e6:.3g} us" for k, v in used.items()))
    engines = {x.row["sim"]["profile"]: x.terms for x in results if x.terms is not None}
    for name, terms in engines.items():  # engine profiles fitted apart on their own rows (experts in host memory)
        head += (f"\nprofile {name}, " + ("fitted on its own (fit) rows: " if fit else "as shipped: ")
                 + ", ".join(f"{k} {v * 1e6:.4g} us" for k, v in terms.items()))
    if markdown:
        print(_markdown(results) + "\n\n```\n" + "\n".join([head, *_summary_lines(s)]) + "\n```")
        return
    console = wide_console()
    console.print(_table(results))
    console.print(head)
    for line in _summary_lines(s):
        console.print(line)
    console.print(f"[dim]{len(skipped)} rows not predicted (batch > 1, no acceptance length, unknown shape or hardware); "
                  "see --json. Sources: the url of each row in ecosim/catalog/data/published.json[/dim]")
