"""The input gate on traces: a bad manifest value is refused in one line by every command that reads it (replay,
the streamed replay with `--max-memory`, the event engine, sweep), naming the field, the value and what is
allowed; damaged files are refused in one line, also by sweep's workers and across a process boundary; a trace
without positions is valid but not replayed. The declarations behind it live in ecosim/gate.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from ecosim.trace.io import write_trace
from gate_cases import base_trace, edited, refused, run


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return base_trace(tmp_path_factory.mktemp("gate"))


MANIFEST_EDITS = [
    ("model.expert_bytes", KeyError, "missing"),
    ("tree", KeyError, "missing"),
    ("model.kv_bytes_per_token", 1e308, "1e+308"),
    ("draft.bytes", "x", '"x"'),
    ("tree.depth", math.nan, "NaN"),
    ("model.bytes_per_param", None, "null"),
    ("model.source", {}, "{}"),
    ("model.kv_bytes_per_token", -math.inf, "-Infinity"),
    ("tree.depth", -5, "-5"),
    ("model.bytes_per_param", math.nan, "NaN"),
    ("decoding.mode", "sample", "greedy"),
]
COMMANDS = {
    "replay": ["replay", "{T}", "--policy", "ar"],
    "streamed": ["replay", "{T}", "--policy", "ar", "--max-memory", "1GB"],
    "des": ["replay", "{T}", "--policy", "ar", "--engine", "des"],
    "sweep": ["sweep", "{T}", "--out", "{O}", "--policy", "ar", "--jobs", "1"],
}


@pytest.mark.parametrize("key,value,shown", MANIFEST_EDITS, ids=[f"{k}={v}" for k, v, _ in MANIFEST_EDITS])
def test_a_bad_manifest_value_is_refused_by_every_command(capsys, tmp_path, base, key, value, shown):
    t = edited(base, tmp_path / "t", key, value)
    for name, args in COMMANDS.items():
        line = refused(capsys, [a.replace("{T}", str(t)).replace("{O}", str(tmp_path / "out")) for a in args],
                       "manifest.json", key, shown)
        assert "allowed" in line or key == "decoding.mode", (name, line)
        assert not (tmp_path / "out").exists(), name


def test_dense_bytes_zero_is_a_hand_worked_synthetic_shape_never_a_recorded_trace(capsys, tmp_path, base):
    """A real model reads attention, embeddings and LM head every forward: a recorded trace claiming 0
    dense bytes is refused by every command; a synthetic hand-worked shape may (every byte an expert)."""
    t = edited(base, tmp_path / "t", "model.dense_bytes", 0)
    assert run(capsys, "replay", t, "--policy", "ar")[0] == 0  # synthetic: allowed
    m = json.loads((t / "manifest.json").read_text())
    m["synthetic"], m["provenance"] = False, {"kind": "real", "source": "a recording"}
    (t / "manifest.json").write_text(json.dumps(m))
    for name, args in COMMANDS.items():
        refused(capsys, [a.replace("{T}", str(t)).replace("{O}", str(tmp_path / "out")) for a in args],
                "manifest.json", "model.dense_bytes", "recorded trace")
    refused(capsys, ["check", t], "model.dense_bytes")


def test_the_streamed_replay_refuses_a_truncated_node_file(capsys, tmp_path, base):
    t = shutil.copytree(base, tmp_path / "t")
    data = (t / "nodes.parquet").read_bytes()
    (t / "nodes.parquet").write_bytes(data[: len(data) // 2])
    refused(capsys, ["replay", t, "--policy", "ar", "--max-memory", "1GB"], "nodes.parquet")


def test_a_trace_without_positions_is_valid_but_not_replayed(capsys, tmp_path, base):
    from ecosim.trace.schema import empty_nodes, empty_positions, experts_width

    m = json.loads((base / "manifest.json").read_text())
    m = {k: v for k, v in m.items() if k not in ("format", "version")} | {"requests": []}
    t = write_trace(tmp_path / "t0", m, empty_positions(), empty_nodes(experts_width(m["model"])))
    assert run(capsys, "check", t)[0] == 0
    for args in (["replay", t], ["replay", t, "--max-memory", "1GB"], ["replay", t, "--engine", "des", "--policy", "ar"],
                 ["sweep", t, "--out", tmp_path / "s", "--policy", "ar"], ["tune", t]):
        refused(capsys, args, "no positions to replay")
    assert not (tmp_path / "s").exists()


def test_sweep_refuses_a_corrupt_positions_file_in_one_line(capsys, tmp_path, base):
    t = shutil.copytree(base, tmp_path / "t")
    (t / "positions.parquet").write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    refused(capsys, ["sweep", t, "--out", tmp_path / "s", "--policy", "ar"], "positions.parquet")


def test_a_trace_error_crosses_a_process_boundary_intact():
    """A sweep worker that refuses a trace (negative depths) raises TraceError in its process: it must unpickle
    in the driver as the same one-line error, not kill the pool (BrokenProcessPool)."""
    from ecosim.gate import GateError
    from ecosim.trace.checks import TraceError

    def rebuilt(e: Exception) -> Exception:  # what unpickling does with an exception's __reduce__
        cls, args = e.__reduce__()[:2]
        return cls(*args)

    e = TraceError("/t/nodes.parquet", "depth must be depth(parent) + 1", 7, "depth")
    back = rebuilt(e)
    assert type(back) is TraceError and str(back) == str(e) and back.row == 7
    g = GateError("p.json", "hbm_bw", "is 0; allowed: a finite number in (0, 1e+15]")
    assert str(rebuilt(g)) == str(g)


def test_sweep_with_workers_refuses_negative_depths_in_one_line(capsys, tmp_path, base):
    import pyarrow.parquet as pq

    t = shutil.copytree(base, tmp_path / "t")
    table = pq.read_table(t / "nodes.parquet")
    depth = table.column("depth").to_numpy().copy()
    depth[depth > 0] *= -1
    import pyarrow as pa

    table = table.set_column(table.schema.get_field_index("depth"), "depth", pa.array(depth, pa.int8()))
    pq.write_table(table, t / "nodes.parquet")
    refused(capsys, ["sweep", t, "--out", tmp_path / "s", "--policy", "ar,confidence", "--budget", "1,2", "--jobs", "2"],
            "nodes.parquet", "depth")
