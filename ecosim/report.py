"""Build the report notebooks: jupytext sources in reports/ executed into HTML with their plots.

Each notebook is a plain `.py` file in percent format (diffable). Building one means: convert it
to a notebook with the `python3` kernel, execute it with papermill (a real kernel in this
environment, parameters injected into the cell tagged `parameters`), and export HTML. Figures are
also saved as PNG files beside the HTML by the notebooks themselves (`save(fig, name)`).
A failing cell fails the build with the notebook's name and the error's last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ecosim.errors import EcoSimError
from ecosim.outputs import REPORT_BUILD, REPORT_MARKER, check_output

ORDER = ("expert_scattering", "cost_vs_experts", "lambda_sweep", "pareto", "predictors", "fidelity", "published", "reproduction")


@dataclass(frozen=True)
class ReportConfig:
    """What the notebooks read and where the build goes; each field is an `ecosim report` option."""

    traces: Path = Path("traces")
    out: Path = Path("reports/_build")
    reports: Path = Path("reports")  # the notebooks' folder (the repository's, run from its root); run in its parent
    validation: Path | None = None  # a `validate report` folder (measured vs simulated)
    only: tuple[str, ...] = ()
    # Real routing (a routing set, or the shared npz folder) for the real / hybrid / synthetic routing
    # comparison; None: ../shared/data/gpt-oss-20b-routing beside the repository, where it exists.
    routing: Path | None = None

    def routing_dir(self) -> Path | None:
        """The real routing the notebooks get, or None (they then show synthetic routing only)."""
        if self.routing is not None:
            if not self.routing.exists():
                raise EcoSimError(f"{self.routing}: no such routing directory")
            return self.routing
        default = self.default_routing()
        return default if default.is_dir() else None

    def default_routing(self) -> Path:
        """../shared/data/gpt-oss-20b-routing beside the repository (the reports folder's parent)."""
        return self.reports.resolve().parent.parent / "shared" / "data" / "gpt-oss-20b-routing"


def notebooks(reports: Path = Path("reports"), only: tuple[str, ...] = ()) -> list[Path]:
    """The notebooks of a reports folder, in reading order."""
    if not reports.is_dir():
        raise EcoSimError(f"{reports}: no such reports folder (run from the repository's root or give --reports DIR)")
    found = {p.stem: p for p in reports.glob("*.py") if not p.name.startswith("_")}
    names = [n for n in ORDER if n in found] + sorted(set(found) - set(ORDER))
    unknown = set(only) - set(names)
    if unknown:
        raise EcoSimError(f"unknown notebook(s) {', '.join(sorted(unknown))}; known: {', '.join(names)}")
    return [found[n] for n in names if not only or n in only]


@contextlib.contextmanager
def _kernel_stderr_kept() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file while notebooks run.

    The kernels papermill starts inherit it and log to it on a clean run ("Kernel is running over
    TCP without encryption", "KeyboardInterrupt caught in kernel" at shutdown): noise, not
    problems. A failing cell is reported from the notebook itself (EcoSimError below)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


# Where a kernel and its client keep their files: the connection file (jupyter_client writes it in
# the temporary directory or the runtime dir), IPython's profile and matplotlib's cache (the home
# directory by default). A build points all of them into one private directory it removes, so a
# build, finished or stopped by SIGTERM or Ctrl-C (ecosim.cli turns both into exceptions), leaves
# nothing in /tmp or the home directory.
_PRIVATE_DIRS = ("JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR", "TMPDIR")


@contextlib.contextmanager
def _private_files() -> Iterator[Path]:
    """Point the kernels' and the client's files into a temporary directory, removed on the way out."""
    saved_env = {k: os.environ.get(k) for k in _PRIVATE_DIRS}
    saved_tempdir = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="ecosim-report-") as d:
        try:
            for k in _PRIVATE_DIRS:
                os.environ[k] = str(Path(d) / k.lower())
                Path(os.environ[k]).mkdir()
            tempfile.tempdir = os.environ["TMPDIR"]
            yield Path(d)
        finally:
            tempfile.tempdir = saved_tempdir
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def build(cfg: ReportConfig, progress=None) -> list[Path]:
    """Execute the notebooks; returns the HTML files written."""
    if not cfg.traces.exists():
        raise EcoSimError(f"{cfg.traces}: no such traces directory")
    pages = notebooks(cfg.reports, cfg.only)  # an unknown --only is refused before anything else
    routing = cfg.routing_dir()
    check_output(cfg.out, REPORT_BUILD)  # a build is rebuilt; any other folder is never written into
    try:
        import jupytext
        import nbformat
        import papermill
        from nbconvert import HTMLExporter
    except ImportError as e:
        raise EcoSimError(f"reports need the reports extra: pip install -e '.[reports]' ({e.name} is missing)") from None
    out = cfg.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_MARKER).touch()
    written = []
    with _private_files():  # nothing left in /tmp or the home directory, even on SIGTERM
        for src in pages:
            nb = jupytext.read(src)
            nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
            params = {
                "traces": str(cfg.traces.resolve()),
                "out": str(out / src.stem),
                "validation": str(cfg.validation.resolve()) if cfg.validation else "",
                "routing": str(routing.resolve()) if routing else "",
            }
            (out / src.stem).mkdir(exist_ok=True)
            raw = out / f"{src.stem}.ipynb"
            nbformat.write(nb, raw)
            try:
                with _kernel_stderr_kept():
                    papermill.execute_notebook(str(raw), str(raw), parameters=params, kernel_name="python3",
                                               cwd=str(cfg.reports.resolve().parent), progress_bar=False, log_output=False)
            except papermill.PapermillExecutionError as e:
                raise EcoSimError(f"{src.name}: cell {e.exec_count} failed: {e.ename}: {str(e.evalue).splitlines()[0][:300]}") from None
            html, _ = HTMLExporter().from_notebook_node(nbformat.read(raw, as_version=4))
            page = out / f"{src.stem}.html"
            page.write_text(html, encoding="utf-8")
            written.append(page)
            if progress:
                progress(page)
    (out / "index.json").write_text(json.dumps([p.name for p in written], indent=1))
    return written
