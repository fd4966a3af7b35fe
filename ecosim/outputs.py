"""What a command may write over: one rule for every output path (`--out`, `synth DIR`).

A command never destroys something it did not create. Before any work, every writer calls
`check_output(path, KIND, ...)`, which allows:

- nothing at the path, or an empty directory: write;
- an output of the command's own kind (a trace, a sweep directory, a predictor file, ...):
  - a *resumable* kind (a sweep directory, a report build, a comparison folder: outputs the
    command regenerates from its inputs) is continued or rebuilt in place;
  - `--resume` continues it where the command offers that (`tracer record`);
  - `--force` replaces it, except an output the kind marks *kept* for this command: `ecosim
    synth` never replaces a real (recorded) trace, even with `--force`;
  - otherwise the command refuses and says which flag would continue or replace it;
- anything else (a file of another kind, a directory that is not such an output): refused,
  whatever the flags.

A refusal is one `EcoSimError` line (exit status 2 through the CLIs), raised before anything is
touched.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ecosim.errors import EcoSimError


def _json(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _is_trace(path: Path) -> bool:
    m = _json(path / "manifest.json")
    return m is not None and m.get("format") == "ecosim-trace"


def _is_real_trace(path: Path) -> bool:
    m = _json(path / "manifest.json")
    return m is not None and m.get("synthetic") is False


def _is_predictor(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return "meta.npy" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _is_timeline(path: Path) -> bool:
    doc = _json(path)
    return doc is not None and "traceEvents" in doc


def _is_profile(path: Path) -> bool:
    doc = _json(path)
    return doc is not None and "hbm_bw" in doc and "calibration" in doc


# Written first into a folder a command builds, so an interrupted build is still recognised as one.
REPORT_MARKER = ".ecosim-report"
RUN_MARKER = ".validate-run"


@dataclass(frozen=True)
class OutputKind:
    """One kind of output: how to recognise it, and whether rewriting it in place loses anything."""

    noun: str  # "a trace", in messages
    is_dir: bool
    recognise: Callable[[Path], bool]
    # Rebuilt or resumed in place without --force: derived outputs the command regenerates (a
    # sweep keeps every finished part; a report build is re-executed from its sources).
    rewritable: bool = False
    # Never replaced, even with --force, by a command that passes keep_protected=True.
    protected: Callable[[Path], bool] = lambda p: False
    protected_why: str = ""


TRACE = OutputKind("a trace", True, _is_trace, protected=_is_real_trace,
                   protected_why="holds a real (recorded) trace, which a synthetic one never replaces, even with --force; "
                                 "write elsewhere or delete it yourself")
SWEEP = OutputKind("a sweep directory", True, lambda p: (p / "sweep.json").is_file() or (p / "parts").is_dir(),
                   rewritable=True)
PREDICTOR = OutputKind("a predictor file", False, _is_predictor)
REPORT_BUILD = OutputKind("a report build", True,
                          lambda p: (p / "index.json").is_file() or (p / REPORT_MARKER).is_file(), rewritable=True)
PROFILE = OutputKind("a hardware profile", False, _is_profile)
TIMELINE = OutputKind("a timeline (Chrome trace JSON)", False, _is_timeline)
VALIDATE_RUN = OutputKind("a validate run", True,
                          lambda p: (p / "measured.json").is_file() or (p / "trace" / "manifest.json").is_file()
                          or (p / RUN_MARKER).is_file())
DEVICE_CHECK = OutputKind("a device check", True,
                          lambda p: (p / "summary.json").is_file() and (_json(p / "summary.json") or {}).get("schema")
                          == "validate-device-check")
COMPARISON = OutputKind("a comparison folder", True,
                        lambda p: (p / "comparison.json").is_file() or (p / "comparison.parquet").is_file()
                        or (p / "measured.json").is_file(),
                        rewritable=True)


def check_output(
    path: Path,
    kind: OutputKind,
    *,
    force: bool = False,
    resume: bool = False,
    can_resume: bool = False,
    keep_protected: bool = False,
    flag: str = "--out",
) -> None:
    """Refuse (EcoSimError, one line) to write `kind` at `path` when that could destroy anything
    the command did not create (module docstring). `can_resume`: the command has `--resume`."""
    where = f"{flag} {path}" if flag else str(path)
    if not path.exists() and not path.is_symlink():
        return
    if kind.is_dir:
        if not path.is_dir():
            raise EcoSimError(f"{where}: exists and is not a directory (so not {kind.noun}); refusing to overwrite it")
        if not any(path.iterdir()):
            return
    elif path.is_dir():
        raise EcoSimError(f"{where}: is a directory; give a file name")
    if not kind.recognise(path):
        raise EcoSimError(f"{where}: exists and is not {kind.noun}; refusing to overwrite it")
    if kind.rewritable or resume:
        return
    if not force:
        ways = "pass --resume to continue it or --force to replace it" if can_resume else "pass --force to replace it"
        raise EcoSimError(f"{where}: {kind.noun} is already there; {ways}")
    if keep_protected and kind.protected(path):
        raise EcoSimError(f"{where}: {kind.protected_why}")
