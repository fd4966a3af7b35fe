"""`ecosim report`: execute the report notebooks into HTML with their plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ecosim.cli import app, listed
from ecosim.report import ReportConfig, build


@app.command()
def report(
    traces: Annotated[Path, typer.Option(help="Traces the notebooks replay (real ones are preferred; synthetic are labelled).")] = Path("traces"),
    out: Annotated[Path, typer.Option(help="Where the HTML pages and PNG figures go.")] = Path("reports/_build"),
    validation: Annotated[Path | None, typer.Option(help="A `validate report` folder with measured-vs-simulated results.")] = None,
    only: Annotated[list[str] | None, typer.Option(help="Build only these notebooks (repeatable or comma-separated), e.g. --only pareto,predictors.")] = None,
    reports: Annotated[Path, typer.Option(help="The notebooks' folder (jupytext .py files); they run in its parent folder.")] = Path("reports"),
    routing: Annotated[Path | None, typer.Option(help="Real routing (an import-routing set or the shared npz folder) for the real / hybrid / synthetic routing comparison; default ../shared/data/gpt-oss-20b-routing beside the repository, where it exists.")] = None,
) -> None:
    """Execute every notebook in reports/ (jupytext sources) with a real kernel; write HTML + PNGs."""
    cfg = ReportConfig(traces=traces, out=out, validation=validation, only=tuple(listed(only, "--only")), reports=reports, routing=routing)
    if cfg.routing_dir() is None:
        print(f"routing: none at {cfg.default_routing()}; the reports show synthetic routing only (give --routing DIR)", flush=True)
    pages = build(cfg, progress=lambda page: print(f"built {page}", flush=True))
    print(f"{len(pages)} reports in {out}")
