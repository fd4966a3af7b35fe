"""The input gate on option values: a bad value is one line (exit 2) naming the option, the value and what is
allowed; an existing timeline is replaced only with --force; every numeric option of every program declares its
range, so validate and the tracer refuse an out-of-range number before any work; validate checks every knob
given; importing routing refuses impossible expert sets.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import numpy as np
import pytest

from ecosim.errors import EcoSimError
from gate_cases import base_trace, refused, run


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return base_trace(tmp_path_factory.mktemp("gate"))


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
