"""What the input-gate tests share: the small synthetic trace every case edits (the test shape, 8 experts), the
shipped hardware and serving profiles they edit, a copy of the trace with one manifest key changed, and the
in-process `ecosim` runner with its check of a refusal (exit 2, one line naming what is wrong, nothing else).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import ROOT, set_path, tiny_trace
from ecosim.cli import main as ecosim_main
from ecosim.trace.io import write_trace


HW = ROOT / "ecosim" / "catalog" / "data" / "hardware" / "h200.json"
SERVING = ROOT / "ecosim" / "catalog" / "data" / "serving" / "eager.json"


def base_trace(root: Path) -> Path:
    """The trace every case edits, written under `root` (each module writes it once, in its `base` fixture)."""
    return write_trace(root / "T", *tiny_trace(37, requests=2, positions=8))


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = ecosim_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, args: list, *needles: str) -> str:
    """The command exits 2 with one line on stderr containing every needle, and prints nothing else."""
    code, out, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("ecosim: error: "), (code, err[-2000:])
    assert "Traceback" not in err and out == "", out
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])
    return lines[0]


def edited(base: Path, to: Path, path: str, value: object) -> Path:
    """A copy of the trace with one manifest key set (KeyError: removed)."""
    shutil.copytree(base, to)
    m = json.loads((to / "manifest.json").read_text())
    set_path(m, path.split("."), value)
    (to / "manifest.json").write_text(json.dumps(m, allow_nan=True))
    return to
