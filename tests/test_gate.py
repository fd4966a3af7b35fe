"""Bad input never reaches a traceback: each case a hostile user tried, refused in one line (exit 2) naming
the file or option, the field, the value and what is allowed; or, where the input is legal but useless, one
warning line and a correct result. The declarations behind it live in ecosim/gate.

Cases run the real CLI in-process (`ecosim.cli.main`), on a small synthetic trace of the test shape (8
experts) with one edit each, through every command that reads it: replay, the streamed replay
(`--max-memory`), the event engine and sweep.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, TINY, tiny_trace
from ecosim.cli import main as ecosim_main
from ecosim.errors import EcoSimError, InternalError
from ecosim.trace.io import write_trace

HW = ROOT / "ecosim" / "catalog" / "data" / "hardware" / "h200.json"
SERVING = ROOT / "ecosim" / "catalog" / "data" / "serving" / "eager.json"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("gate") / "T", *tiny_trace(37, requests=2, positions=8))


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
    keys = path.split(".")
    o = m
    for k in keys[:-1]:
        o = o[k]
    if value is KeyError:
        del o[keys[-1]]
    else:
        o[keys[-1]] = value
    (to / "manifest.json").write_text(json.dumps(m, allow_nan=True))
    return to


# ==================================================================== traces: every command, one line each

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


# ==================================================================== profiles

HW_EDITS = [("hbm_bw", "x"), ("hbm_bw", None), ("hbm_bw", 0), ("hbm_bw", -4.8e12), ("hbm_bw", math.nan),
            ("serving", [1]), ("peak_bf16", 0), ("step_overhead_s", -1)]


@pytest.mark.parametrize("key,value", HW_EDITS, ids=[f"{k}={v}" for k, v in HW_EDITS])
def test_a_bad_hardware_profile_is_refused_naming_the_field(capsys, tmp_path, base, key, value):
    d = json.loads(HW.read_text()) | {key: value}
    (tmp_path / "hw.json").write_text(json.dumps(d, allow_nan=True))
    for args in (["replay", base, "--policy", "ar"], ["sweep", base, "--out", tmp_path / "s", "--policy", "ar"]):
        refused(capsys, args + ["--hardware", tmp_path / "hw.json"], "hw.json", f"field '{key}'", "allowed")
    assert not (tmp_path / "s").exists()


def test_a_misspelled_serving_field_is_named_with_the_right_one(capsys, tmp_path, base):
    d = json.loads(SERVING.read_text())
    d["kernal_latency_s"] = d.pop("kernel_latency_s")
    (tmp_path / "sv.json").write_text(json.dumps(d))
    refused(capsys, ["replay", base, "--policy", "ar", "--profile", tmp_path / "sv.json"],
            "sv.json", "kernal_latency_s", "did you mean 'kernel_latency_s'")


def test_shipped_and_calibrated_profiles_pass_the_gate():
    from ecosim.catalog.devices import DEVICES, load_profile
    from ecosim.catalog.serving import load_serving, shipped

    assert len(DEVICES) >= 6 and all(load_serving(n) for n in shipped())
    for p in (ROOT / "tests" / "validate" / "data").rglob("profile.json"):
        assert load_profile(p).hbm_bw > 0


def test_arrivals_must_be_finite(capsys, tmp_path, base):
    (tmp_path / "a.json").write_text("[0, 1, Infinity]")
    refused(capsys, ["replay", base, "--engine", "des", "--policy", "ar", "--arrivals", tmp_path / "a.json"],
            "a.json", "Infinity", "allowed")
    (tmp_path / "a.json").write_text("[0]")
    refused(capsys, ["replay", base, "--engine", "des", "--policy", "ar", "--arrivals", tmp_path / "a.json"],
            "at least 2")


# ==================================================================== the cost model's boundary


def test_no_negative_or_non_finite_time_leaves_the_cost_model():
    from ecosim.catalog.devices import get_device
    from ecosim.cost import CostModel

    for bad in (-1.0, math.nan, 0.0):
        c = CostModel(TINY, get_device("h200").replace(hbm_bw=bad) if bad else get_device("h200").replace(peak_bf16=bad))
        with pytest.raises(InternalError) as e:
            c.step_times(np.ones((2, 3)), np.ones(2), np.ones(2), False)
        msg = str(e.value)
        assert "\n" not in msg and "tiny-test" in msg and "hbm_bw" in msg and "must be finite and >= 0" in msg
    ok = CostModel(TINY, get_device("h200")).step_times(np.ones((2, 3)), np.ones(2), np.ones(2), False)
    assert np.all(np.isfinite(ok)) and np.all(ok > 0)


def test_an_internal_error_is_one_line_and_exit_70(capsys, monkeypatch, base):
    from ecosim.cost import CostModel

    monkeypatch.setattr(CostModel, "bw", property(lambda self: -1.0))
    code, out, err = run(capsys, "replay", base, "--policy", "ar")
    assert code == 70 and len(err.strip().splitlines()) == 1 and "internal error" in err and "Traceback" not in err


# ==================================================================== option values


@pytest.mark.parametrize("args,needles", [
    (["replay", "{T}", "--placement", "ep:²"], ["ep:²", "ascii"]),
    (["replay", "{T}", "--placement", "ep:٣"], ["ascii"]),
    (["replay", "{T}", "--placement", "ep:99999999"], ["[1, 32767]"]),
    (["replay", "{T}", "--placement", "offload:1e3"], ["not understood", "offload:CAP"]),
    (["replay", "{T}", "--placement", "offload:٤"], ["ascii"]),
    (["replay", "{T}", "--placement", "ep:16", "--policy", "ar"], ["8 experts", "N <= 8"]),
    (["synth", "{D}/x", "--model", "olmoe-1b-7b", "--seed", "-1"], ["--seed"]),
    (["predictor", "train", "{T}", "--out", "{D}/p.npz", "--seed", "-1"], ["--seed"]),
    (["synth", "{D}/x", "--model", "olmoe-1b-7b", "--requests", "1", "--positions", "2000000000", "--accept-len", "2"],
     ["node rows", "allowed"]),
    (["replay", ""], ["empty"]),
    (["replay", "{T}", "--bw", ""], ["--bw", "empty"]),
    (["replay", "{T}", "--bw="], ["--bw", "empty"]),
    (["replay", "{T}", "--max-memory", ""], ["--max-memory", "empty"]),
    (["synth", "{D}/x", "--model", "olmoe-1b-7b", "--draft", ""], ["--draft", "empty"]),
    (["replay", "{T}", "--bw", "3300000GB/s"], ["--bw", "hbm_bw", "allowed"]),
    (["replay", "{T}", "--budget", "100000"], ["budget", "32766"]),
    (["replay", "{T}", "--engine", "des", "--timeline", "{D}"], ["--timeline", "directory"]),
    (["replay", "{T}", "--engine", "des", "--timeline", "{D}/no/t.json"], ["--timeline", "no folder"]),
    (["sweep", "{T}", "--out", "{D}/s", "--executor", "ray", "--ray-address", "bogus-host.invalid:1"], ["cannot reach"]),
])
def test_a_bad_option_value_is_one_line(capsys, tmp_path, base, args, needles):
    if "ray" in args:
        pytest.importorskip("ray")
    t0 = time.perf_counter()
    refused(capsys, [a.replace("{T}", str(base)).replace("{D}", str(tmp_path)) for a in args], *needles)
    assert not (tmp_path / "x").exists() and not (tmp_path / "s").exists() and not (tmp_path / "p.npz").exists()
    if "ray" in args:
        assert time.perf_counter() - t0 < 30  # seconds, not Ray's minutes of retries


def test_an_existing_timeline_is_replaced_only_with_force(capsys, tmp_path, base):
    f = tmp_path / "t.json"
    des = ["replay", base, "--engine", "des", "--policy", "ar", "--timeline", f]
    f.write_text("precious")
    refused(capsys, des, "not a timeline")
    assert f.read_text() == "precious"
    f.unlink()
    assert run(capsys, *des)[0] == 0 and "traceEvents" in json.loads(f.read_text())
    refused(capsys, des, "--force")
    assert run(capsys, *des, "--force")[0] == 0


def warned(capsys, args: list, *needles: str) -> str:
    code, out, err = run(capsys, *args)
    warnings = [line for line in err.splitlines() if line.startswith("ecosim: warning: ")]
    assert code == 0 and len(warnings) == 1, (code, err)
    for n in needles:
        assert n.lower() in warnings[0].lower(), (n, warnings[0])
    return out


def test_legal_but_useless_values_are_one_warning(capsys, base):
    out = warned(capsys, ["replay", base, "--lambda", "auto", "--policy", "confidence"], "--lambda auto", "no effect")
    assert "confidence" in out
    warned(capsys, ["replay", base, "--budget", "100", "--policy", "confidence"], "above every tree", "--budget 12")
    warned(capsys, ["replay", base, "--placement", "ep:3", "--policy", "ar"], "unevenly", "N dividing 8")
    code, _, err = run(capsys, "replay", base, "--policy", "confidence", "--budget", "4", "--placement", "ep:4")
    assert code == 0 and "warning" not in err  # what is useful says nothing


def test_a_sweep_warns_of_an_axis_no_policy_reads_and_of_budgets_above_every_tree(capsys, base, tmp_path):
    """The same warnings as replay's, for a sweep's axes: one line each, the sweep still runs."""
    warned(capsys, ["sweep", base, "--policy", "confidence", "--lambda", "auto", "--out", tmp_path / "a"],
           "--lambda auto", "no effect", "not an axis")
    warned(capsys, ["sweep", base, "--policy", "confidence", "--budget", "4,100", "--out", tmp_path / "b"],
           "--budget 100 above every tree", "--budget 12")
    code, _, err = run(capsys, "sweep", base, "--policy", "confidence,ecospec", "--lambda", "0.5,auto", "--budget", "4:8:4",
                       "--out", tmp_path / "c")
    assert code == 0 and "warning" not in err  # every axis is read by a swept policy, every budget within the trees


def test_validate_checks_every_knob_given():
    from validate.choice import from_flags

    with pytest.raises(EcoSimError, match="--lambda: lambda must be finite"):
        from_flags("confidence", {"lam": "nan"})


def test_every_numeric_option_of_every_program_has_a_range():
    """Every int and float option declares its range (typer's min/max), or is a policy knob (whose check is its
    range): `--seed -1`, `--threads 0`, `--depth 0` are refused by the parser, not deep inside a run."""
    import importlib
    import typing

    import typer.main

    from ecosim.cli import app
    from ecosim.policies import registry

    importlib.import_module("ecosim.cli.__init__")
    for m in ("fidelity", "predictor", "replay", "report", "routing", "sweep", "traces", "tune"):
        importlib.import_module(f"ecosim.cli.{m}")
    apps = [app]
    for mod in ("tracer.cli", "validate.cli"):
        try:
            apps.append(importlib.import_module(mod).app)
        except ImportError:  # without torch: ecosim's own options still count
            pass
    knobs = {k.name for k in registry.knobs()}

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for n, c in cmd.commands.items():
                yield from walk(c, path + [n])
        else:
            for p in cmd.params:
                yield " ".join(path), p

    missing, seen = [], 0
    for a in apps:
        for where, p in walk(typer.main.get_command(a), []):
            d = getattr(p, "type_descriptor", None)
            if d is None:
                continue
            t = d.annotation
            args = [x for x in typing.get_args(t) if x is not type(None)]
            t = args[0] if args and typing.get_origin(t) is not list else t
            if t in (int, float):
                seen += 1
                if d.parameter_info.min is None and d.parameter_info.max is None and p.name not in knobs:
                    missing.append(f"{where} --{p.name}")
    assert seen > 20 and not missing, missing


def test_import_routing_refuses_impossible_sets(capsys, tmp_path):
    np.save(tmp_path / "zeros.npy", np.zeros((6, 2, 2), dtype=np.int64))
    refused(capsys, ["import-routing", tmp_path / "zeros.npy", "--out", tmp_path / "r"], "1 experts", "[2, 32767]")
    refused(capsys, ["import-routing", tmp_path / "zeros.npy", "--out", tmp_path / "r", "--num-experts", "8"], "repeats an expert")
    np.save(tmp_path / "ones.npy", np.zeros((6, 2, 1), dtype=np.int64))
    refused(capsys, ["import-routing", tmp_path / "ones.npy", "--out", tmp_path / "r"], "[2, 32767]")
    ok = np.stack([np.arange(6) % 4, (np.arange(6) + 1) % 4], axis=1)[:, None, :].repeat(2, axis=1)
    np.save(tmp_path / "ok.npy", ok)
    refused(capsys, ["import-routing", tmp_path / "ok.npy", "--out", tmp_path / "r", "--num-experts", "40000"], "32767")
    assert not (tmp_path / "r").exists()
    assert run(capsys, "import-routing", tmp_path / "ok.npy", "--out", tmp_path / "r", "--num-experts", "8")[0] == 0


# ==================================================================== processes


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_sweep_leaves_no_worker_behind(tmp_path, base):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "ecosim.cli", "sweep", str(base), "--out", str(tmp_path / "s"), "--jobs", "2",
           "--policy", "confidence,ecospec", "--budget", ",".join(map(str, range(1, 13)))]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            kids = _children(p.pid)
            if len([k for k in kids if _alive(k)]) >= 2:
                break
            time.sleep(0.05)
        assert p.poll() is None and len(kids) >= 2, "the sweep ended before its workers could be seen"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(k) for k in kids):
            time.sleep(0.1)
        assert not [k for k in kids if _alive(k)], "workers outlived the killed sweep"
    finally:
        for k in kids:
            if _alive(k):
                os.kill(k, signal.SIGKILL)


@pytest.mark.parametrize("prog,args,needle", [
    ("validate", ["run", "--out", "{D}/r", "--policy", "ar", "--threads", "0"], "--threads"),
    ("validate", ["calibrate", "--model", "x", "--out", "{D}/p.json", "--depth", "0"], "--depth"),
    ("validate", ["calibrate", "--model", "x", "--out", "{D}/p.json", "--topk", "-1"], "--topk"),
    ("validate", ["calibrate", "--model", "x", "--out", "{D}/p.json", "--seed", "-1"], "--seed"),
    ("tracer", ["tiny", "--out", "{D}/m", "--seed", "-1"], "--seed"),
])
def test_validate_and_tracer_refuse_out_of_range_numbers_before_any_work(capsys, tmp_path, prog, args, needle):
    pytest.importorskip("torch")
    main = importlib.import_module(f"{prog}.cli").main
    try:
        code = main([a.replace("{D}", str(tmp_path)) for a in args])
    except SystemExit as e:  # tracer's main exits with the status
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not any(tmp_path.iterdir())
