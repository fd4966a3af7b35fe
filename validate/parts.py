"""A `validate run`'s committed work, so that rerunning the same command continues it (as `sweep` does).

The run's unit of work is a *round*: one request decoded by every policy in one repeat (the
decoding loop goes repeat -> request -> policy, decode.py). As each piece of work ends it is
written under RUN/parts/, each file atomically (a temporary file, then a rename), so a kill at any
moment leaves only whole files:

- options.json: what must match to continue (`RunConfig.resume_key`); written first;
- trace.json: the trace the run decodes, once recorded on the spot (or taken from --trace);
- reference.json: the greedy reference tokens of every request;
- round-R-Q.json: request Q's decodes by every policy in repeat R (tokens and timed steps);
- calibration.json: the on-the-spot calibration's timed runs so far (its seeded run order is
  the same on a rerun, so it continues where it stopped).

Rerunning the same command loads what is there and does the rest; `--force` starts again. Another
command into the same folder (other options) is refused with one line naming the first option
that differs.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ecosim.errors import EcoSimError
from validate.calibrate import Calibration, Samples

if TYPE_CHECKING:
    from validate.decode import Decoded

PARTS = "parts"
# Test hook (tests/validate/test_validate_resume.py): "N" raises KeyboardInterrupt right after the
# N-th round this process commits, so a test interrupts at a point that does not depend on speed.
INTERRUPT_AFTER_ROUND = "VALIDATE_TEST_INTERRUPT_AFTER_ROUND"


def _write(path: Path, doc: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc) + "\n")
    os.replace(tmp, path)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Parts:
    """RUN/parts/: what a run has committed (module docstring)."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir) / PARTS
        self.committed_now = 0  # rounds committed by this process

    def check(self, key: dict[str, Any], force: bool) -> None:
        """Before any work: a rerun of the same options continues; other options are refused."""
        if force:
            return
        old = _read(self.dir / "options.json")
        if old is None:
            if (self.dir.parent / "measured.json").is_file():
                raise EcoSimError(f"--out {self.dir.parent}: holds a finished validate run without resumable parts; "
                                  "pass --force to replace it")
            return
        for name in sorted(set(old) | set(key)):
            if old.get(name) != key.get(name):
                raise EcoSimError(f"--out {self.dir.parent}: holds a validate run with other options ({name}: "
                                  f"{old.get(name)!r} there, {key.get(name)!r} now); rerun its own command to continue "
                                  "it, or pass --force to replace it")

    def start(self, key: dict[str, Any], force: bool) -> None:
        """Create parts/ (emptied with --force) and record the options."""
        if force and self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        _write(self.dir / "options.json", key)

    # ------------------------------------------------------------------ trace and reference

    def trace(self) -> Path | None:
        doc = _read(self.dir / "trace.json")
        return Path(doc["trace"]) if doc and (Path(doc["trace"]) / "manifest.json").is_file() else None

    def save_trace(self, path: Path) -> None:
        _write(self.dir / "trace.json", {"trace": str(path)})

    def reference(self) -> dict[int, list[int]] | None:
        doc = _read(self.dir / "reference.json")
        return None if doc is None else {int(k): v for k, v in doc.items()}

    def save_reference(self, ref: dict[int, list[int]]) -> None:
        _write(self.dir / "reference.json", {str(k): v for k, v in ref.items()})

    # ------------------------------------------------------------------ rounds

    def _round(self, rep: int, rid: int) -> Path:
        return self.dir / f"round-{rep}-{rid}.json"

    def round(self, rep: int, rid: int, policies: int) -> list[Decoded] | None:
        """The committed decodes of (repeat, request), one per policy, or None."""
        from validate.decode import Decoded, Step  # torch: only where decoding happens

        doc = _read(self._round(rep, rid))
        if doc is None or len(doc["decodes"]) != policies:
            return None
        return [Decoded(d["tokens"], [Step(**s) for s in d["steps"]]) for d in doc["decodes"]]

    def commit_round(self, rep: int, rid: int, decodes: list[Decoded]) -> None:
        _write(self._round(rep, rid), {"repeat": rep, "request": rid,
                                       "decodes": [{"tokens": d.tokens, "steps": [s.to_dict() for s in d.steps]}
                                                   for d in decodes]})
        self.committed_now += 1
        if os.environ.get(INTERRUPT_AFTER_ROUND) == str(self.committed_now):
            raise KeyboardInterrupt

    def rounds_done(self) -> int:
        return len(list(self.dir.glob("round-*.json")))

    # ------------------------------------------------------------------ on-the-spot calibration

    def restore_calibration(self, cal: Calibration) -> None:
        """Continue `cal` from its committed runs (the same seeded order: the next run is the one after)."""
        doc = _read(self.dir / "calibration.json")
        if doc is None or doc.get("runs") != len(cal.runs):
            return
        cal.samples = Samples(**doc["samples"])
        cal.done, cal.trial = int(doc["done"]), int(doc["trial"])

    def save_calibration(self, cal: Calibration) -> None:
        _write(self.dir / "calibration.json", {"runs": len(cal.runs), "done": cal.done, "trial": cal.trial,
                                               "samples": asdict(cal.samples)})
