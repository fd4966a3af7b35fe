"""Faults: a full disk mid-write. A write that fails with ENOSPC midway (while writing positions, nodes or the
manifest, at fsync or at the rename) must leave the previous trace (or sweep results file) byte for byte, no
temporaries, and a one-line error through the CLI.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from conftest import hand_trace, tiny_trace
from ecosim.cli import main as ecosim_main
from ecosim.errors import EcoSimError
from ecosim.trace import write as trace_write
from ecosim.trace.io import check_trace, write_trace


def _snapshot(d: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(d.iterdir())}


def _half_then_enospc(real):
    """A writer that writes half of what it was given, then fails as a full disk does."""

    def write(table, where, **kw):
        import io

        buf = io.BytesIO()
        real(table, buf, **kw)
        data = buf.getvalue()
        Path(where).write_bytes(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return write


STAGES = ["positions", "nodes", "manifest", "fsync", "rename"]


@pytest.mark.parametrize("stage", STAGES)
def test_full_disk_mid_write_leaves_the_previous_trace(tmp_path, monkeypatch, stage):
    path = write_trace(tmp_path / "t", *hand_trace())
    before = _snapshot(path)
    real_write, calls = pq.write_table, []

    def write_table(table, where, **kw):
        calls.append(where)
        if (stage == "positions" and len(calls) == 1) or (stage == "nodes" and len(calls) == 2):
            return _half_then_enospc(real_write)(table, where, **kw)
        return real_write(table, where, **kw)

    real_text = Path.write_text

    def write_text(self, data, *a, **k):
        if stage == "manifest" and self.name == "manifest.json":
            real_text(self, data[: len(data) // 2], *a, **k)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_text(self, data, *a, **k)

    real_fsync = os.fsync

    def fsync(fd):
        if stage == "fsync":  # delayed allocation: the disk is found full when the data is flushed
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(pq, "write_table", write_table)
    monkeypatch.setattr(Path, "write_text", write_text)
    monkeypatch.setattr(os, "fsync", fsync)
    if stage == "rename":
        def no_exchange(a, b):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(trace_write, "_exchange", no_exchange)
    with pytest.raises(EcoSimError) as e:
        write_trace(path, *tiny_trace(3))
    msg = str(e.value)
    assert "\n" not in msg and "No space left on device" in msg and "previous trace is intact" in msg
    monkeypatch.undo()
    assert _snapshot(path) == before  # byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"], "a temporary was left behind"
    check_trace(path)


def test_full_disk_through_the_cli_is_one_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "s"
    assert ecosim_main(["synth", str(out), "--model", "olmoe-1b-7b", "--requests", "1", "--positions", "5"]) == 0
    before = _snapshot(out)
    monkeypatch.setattr(pq, "write_table", _half_then_enospc(pq.write_table))
    capsys.readouterr()
    assert ecosim_main(["synth", str(out), "--model", "olmoe-1b-7b", "--requests", "2", "--positions", "5", "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and err[0].startswith("ecosim: error: ")
    monkeypatch.undo()
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_full_disk_while_writing_sweep_results_keeps_the_previous_file(tmp_path, monkeypatch, capsys):
    trace = write_trace(tmp_path / "a", *tiny_trace(5, positions=10))
    args = ["sweep", str(trace), "--out", str(tmp_path / "sw"), "--jobs", "1", "--policy", "ar,confidence", "--budget", "2"]
    assert ecosim_main(args) == 0
    results = tmp_path / "sw" / "results.parquet"
    before = results.read_bytes()

    def write_parquet(self, where, **kw):
        Path(where).write_bytes(b"PAR1" + b"\0" * 100)  # half a file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pl.DataFrame, "write_parquet", write_parquet)
    capsys.readouterr()
    assert ecosim_main([*args[:-2], "--budget", "2,3"]) == 2  # a bigger grid: parts must be written
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0]
    monkeypatch.undo()
    assert results.read_bytes() == before
    assert not [p for p in (tmp_path / "sw").rglob(".tmp-*")]
