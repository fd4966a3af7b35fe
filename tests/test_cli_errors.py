"""Every command refuses bad values in one line: exit status 2, one line on stderr, no traceback.

One table per program (`ecosim`, `tracer`, `validate`); each row is a command line with one bad
value (a unit, a range, a path, a name) and a word the error must contain, so that it says what
was wrong. Rows run in-process (the programs' own `main`, as the console scripts call it); a
handful also run as real subprocesses of the installed scripts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, tiny_trace
from ecosim.cli import main as ecosim_main
from ecosim.trace.io import write_trace

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="tracer and validate need torch and transformers")


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """Substitutions for the tables: a trace, a sweep, files that are not what they should be."""
    d = tmp_path_factory.mktemp("cli_errors")
    trace = write_trace(d / "trace", *tiny_trace(31, positions=8))
    sweep = d / "sweep"
    assert ecosim_main(["sweep", str(trace), "--out", str(sweep), "--jobs", "1", "--policy", "ar", "--budget", "2"]) == 0
    (d / "file.txt").write_text("not a trace\n")
    (d / "bad.json").write_text("{not json")
    (d / "list.json").write_text("[1, 2]")
    (d / "empty").mkdir()
    (d / "prompts.jsonl").write_text(json.dumps({"task": "qa", "text": "hello"}) + "\n")
    return {"T": str(trace), "S": str(sweep), "F": str(d / "file.txt"), "J": str(d / "bad.json"),
            "L": str(d / "list.json"), "E": str(d / "empty"), "N": str(d / "no-such-path"), "D": str(d),
            "P": str(d / "prompts.jsonl")}


def _subst(args: list[str], paths: dict[str, str]) -> list[str]:
    """A whole argument that is a key (T, S, ...) becomes its path; {K} inside one does too."""
    out = []
    for a in args:
        a = paths.get(a, a)
        for k, v in paths.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


OUTPUTS = ("o", "s", "t", "r", "p.json", "p.npz", "tiny")  # what the rows would write, under D


def _clear(d: str) -> None:
    for name in OUTPUTS:
        p = Path(d, name)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _nothing_written(d: str) -> None:
    """A refused command leaves no output behind (at most an empty directory)."""
    for name in OUTPUTS:
        p = Path(d, name)
        assert not p.exists() or (p.is_dir() and not any(p.rglob("*"))), f"{p} was written"


def _one_line(code: int, err: str, prog: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert "Traceback" not in err
    assert needle.lower() in lines[0].lower(), (needle, lines[0])


# ============================================================================================ ecosim
# (args, a word the error must contain). T: a trace, S: a sweep dir, F: a text file, J: bad JSON,
# L: a JSON list, E: an empty directory, N: a path that does not exist.

ECOSIM = [
    # units
    (["replay", "T", "--bw", "3.3XB/s"], "unknown unit"),
    (["replay", "T", "--bw", "3.3"], "not a quantity with a unit"),
    (["replay", "T", "--bw", "3.3TB"], "wrong dimension"),
    (["replay", "T", "--bw", "-3.3TB/s"], "positive"),
    (["replay", "T", "--bw", "0TB/s"], "positive"),
    (["replay", "T", "--bw", "1e999TB/s"], "finite"),
    (["replay", "T", "--bw", "TB/s"], "not a quantity"),
    (["replay", "T", "--peak", "989TB/s"], "wrong dimension"),
    (["replay", "T", "--link-bw", "fast"], "not a quantity"),
    (["replay", "T", "--pcie-bw", "64GB"], "wrong dimension"),
    (["replay", "T", "--step-overhead", "30parsecs"], "unknown unit"),
    (["replay", "T", "--step-overhead", "-1us"], "non-negative"),
    (["replay", "T", "--draft-time", "1.5"], "not a quantity"),
    (["replay", "T", "--max-memory", "2XB"], "unknown unit"),
    (["replay", "T", "--max-memory", "0GB"], "positive"),
    (["replay", "T", "--max-memory", "2GB/s"], "wrong dimension"),
    # ranges
    (["replay", "T", "--budget", "-1"], "budget"),
    (["replay", "T", "--budget", "many"], "--budget"),
    (["replay", "T", "--lambda", "-0.5"], "lambda"),
    (["replay", "T", "--lambda", "nan"], "lambda"),
    (["replay", "T", "--bw-efficiency", "0"], "--bw-efficiency"),
    (["replay", "T", "--bw-efficiency", "1.5"], "--bw-efficiency"),
    (["replay", "T", "--compute-efficiency", "-1"], "--compute-efficiency"),
    (["replay", "T", "--devices", "0"], "--devices"),
    (["replay", "T", "--placement", "ep:0"], "placement"),
    (["replay", "T", "--placement", "offload:-4"], "offload"),
    (["replay", "T", "--placement", "offload:4:fifo"], "fifo"),
    (["replay", "T", "--placement", "ep:2", "--devices", "4"], "conflicts"),
    (["replay", "T", "--engine", "des", "--max-batch", "0"], "--max-batch"),
    (["replay", "T", "--engine", "des", "--arrivals", "poisson:-3"], "rate"),
    (["replay", "T", "--engine", "des", "--arrivals", "poisson:x"], "poisson"),
    (["replay", "T", "--engine", "des", "--arrivals", "N"], "arrivals"),
    (["replay", "T", "--engine", "des", "--arrivals", "concurrency:0"], "clients"),
    (["replay", "T", "--engine", "des", "--arrivals", "concurrency:²"], "clients"),
    (["replay", "T", "--engine", "des", "--arrivals", "concurrency:"], "clients"),
    (["replay", "T", "--concurrency", "0"], "--concurrency"),
    (["replay", "T", "--concurrency", "2", "--max-batch", "3"], "--concurrency"),
    (["replay", "T", "--concurrency", "2", "--arrivals", "together"], "--concurrency"),
    (["replay", "T", "--concurrency", "2", "--max-memory", "1GB"], "--max-memory"),
    (["tune", "T", "--concurrency", "0"], "--concurrency"),
    (["tune", "T", "--concurrency", "x"], "--concurrency"),
    (["replay", "T", "--engine", "des", "--arrivals", "J"], "arrivals"),
    (["replay", "T", "--engine", "des", "--max-memory", "1GB"], "--max-memory"),
    (["replay", "T", "--max-memory", "1kB"], "memory budget"),
    # names
    (["replay", "T", "--policy", "greedy"], "unknown policy"),
    (["replay", "T", "--hardware", "tpu9"], "tpu9"),
    (["replay", "T", "--hardware", "N"], "no-such-path"),
    (["replay", "T", "--hardware", "J"], "bad.json"),
    (["replay", "T", "--predictor", "crystal-ball"], "crystal-ball"),
    (["replay", "T", "--predictor", "F"], "file.txt"),
    (["replay", "T", "--score", "vibes"], "vibes"),
    (["replay", "T", "--cost", "cheap"], "--cost"),
    (["replay", "T", "--engine", "warp"], "--engine"),
    (["replay", "T", "--timeline", "{D}/x.json"], "--engine des"),
    # paths
    (["replay", "N"], "no such file"),
    (["replay", "E"], "no traces"),
    (["replay", "F"], "not a trace"),
    (["replay", "T", "--no-such-flag"], "no such option"),
    # sweep
    (["sweep", "T", "--out", "{D}/o", "--lambda", "0:1:0"], "positive step"),
    (["sweep", "T", "--out", "{D}/o", "--lambda", "1:0:0.1"], "stops before it starts"),
    (["sweep", "T", "--out", "{D}/o", "--lambda", "0:1e9:1e-9"], "at most"),
    (["sweep", "T", "--out", "{D}/o", "--lambda", "-1"], "lambda"),
    (["sweep", "T", "--out", "{D}/o", "--lambda", "0:inf:1"], "lambda"),
    (["sweep", "T", "--out", "{D}/o", "--budget", "-8"], "budget"),
    (["sweep", "T", "--out", "{D}/o", "--budget", "2.5"], "integer"),
    (["sweep", "T", "--out", "{D}/o", "--bw", "2TB/s,3.3XB/s"], "unknown unit"),
    (["sweep", "T", "--out", "{D}/o", "--bw", ""], "--bw"),
    (["sweep", "T", "--out", "{D}/o", "--placement", "hbm,disk"], "disk"),
    (["sweep", "T", "--out", "{D}/o", "--policy", "greedy"], "unknown policy"),
    (["sweep", "T", "--out", "{D}/o", "--score", "vibes"], "vibes"),
    (["sweep", "T", "--out", "{D}/o", "--predictor", "psychic"], "psychic"),
    (["sweep", "T", "--out", "{D}/o", "--hardware", "tpu9"], "tpu9"),
    (["sweep", "T", "--out", "{D}/o", "--executor", "spark"], "--executor"),
    (["sweep", "T", "--out", "{D}/o", "--objective", "joy"], "--objective"),
    (["sweep", "T", "--out", "{D}/o", "--jobs", "0"], "--jobs"),
    (["sweep", "T", "--out", "{D}/o", "--step-overhead", "1 parsec"], "unknown unit"),
    (["sweep", "T", "--out", "F"], "not a directory"),
    (["sweep", "N", "--out", "{D}/o"], "no such file"),
    # winner, pareto
    (["winner", "N"], "not a sweep directory"),
    (["winner", "E"], "not a sweep directory"),
    (["winner", "S", "--objective", "joy"], "objective"),
    (["winner", "S", "--min-tokens-per-step", "-1"], "min-tokens-per-step"),
    (["pareto", "N"], "not a sweep directory"),
    (["pareto", "F"], "not a directory"),
    # check, inspect
    (["check", "N"], "no such file"),
    (["check", "E"], "no traces"),
    (["check", "F"], "not a trace"),
    (["inspect", "N"], "no such file"),
    (["inspect", "E"], "no traces"),
    # synth
    (["synth", "{D}/s", "--model", "gpt-9"], "unknown model"),
    (["synth", "{D}/s", "--requests", "0"], "--requests"),
    (["synth", "{D}/s", "--positions", "-5"], "--positions"),
    (["synth", "{D}/s", "--depth", "0"], "--depth"),
    (["synth", "{D}/s", "--max-nodes", "5000"], "--max-nodes"),
    (["synth", "{D}/s", "--accept", "1.5"], "--accept"),
    (["synth", "{D}/s", "--skew", "-1"], "--skew"),
    (["synth", "{D}/s", "--token-affinity", "0.8", "--parent-affinity", "0.5"], "at most 1"),
    (["synth", "F"], "not a trace"),
    (["synth", "E", "--seed", "x"], "--seed"),
    # report
    (["report", "--traces", "N"], "no such"),
    (["report", "--traces", "T", "--only", "nonsense"], "nonsense"),
    (["report", "--traces", "T", "--only", "pareto,nonsense"], "unknown notebook(s) nonsense;"),
    # predictor
    (["predictor", "train", "T", "--kind", "psychic", "--out", "{D}/p.npz"], "psychic"),
    (["predictor", "train", "T", "--kind", "token", "--out", "{D}/p.npz", "--holdout", "1.5"], "holdout"),
    (["predictor", "train", "T", "--kind", "token", "--out", "{D}/p.npz", "--holdout", "-0.1"], "holdout"),
    (["predictor", "train", "T", "--kind", "token", "--out", "{D}/p.npz", "--k", "0"], "--k"),
    (["predictor", "train", "T", "--kind", "token", "--out", "{D}/p.npz", "--mass", "2"], "--mass"),
    (["predictor", "train", "T", "--kind", "token", "--out", "{D}/p.npz", "--max-size", "3"], "--max-size goes with --mass"),
    (["predictor", "train", "T", "--kind", "context", "--out", "{D}/p.npz", "--epochs", "0"], "--epochs"),
    (["predictor", "train", "N", "--kind", "token", "--out", "{D}/p.npz"], "no such file"),
    (["predictor", "train", "T", "--kind", "token", "--out", "{F}/p.npz"], "p.npz"),
    (["predictor", "eval", "psychic", "T"], "psychic"),
    (["predictor", "eval", "N", "T"], "no-such-path"),
    (["predictor", "eval", "F", "T"], "file.txt"),
    (["predictor", "eval", "token", "T", "--folds", "1"], "--folds"),
    (["predictor", "eval", "token", "T", "--split-from", "N"], "no-such-path"),
    (["predictor", "eval", "oracle", "N"], "no such file"),
    (["predictor", "frobnicate"], "no such command"),
    (["frobnicate"], "no such command"),
]


def _ids(table) -> list[str]:
    return [" ".join((row.values if hasattr(row, "values") else row)[-2]) for row in table]


@pytest.mark.parametrize("args,needle", ECOSIM, ids=_ids(ECOSIM))
def test_ecosim_refuses_in_one_line(paths, capsys, args, needle):
    _clear(paths["D"])
    code = ecosim_main(_subst(args, paths))
    out, err = capsys.readouterr()
    _one_line(code, err, "ecosim", needle)
    _nothing_written(paths["D"])


# ============================================================================================ tracer
# M: a tiny pair directory (target/ and draft/); P: a prompts file.

TRACER = [
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--max-new-tokens", "-5"], "--max-new-tokens"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--chunk", "0"], "--chunk"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--threads", "0"], "--threads"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--max-prompts", "0"], "--max-prompts"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--topk", "0"], "--topk"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--topk", "100000"], "--topk"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--depth", "200"], "--depth"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--max-nodes", "-1"], "--max-nodes"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--dtype", "int8"], "--dtype"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--attn", "flash"], "--attn"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--device", "tpu"], "--device"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--device", "cuda:7"], "--device"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}/t", "--resume", "--force"], "--resume and --force"),
    (["record", "--model", "M", "--prompts", "P", "--out", "F"], "not a directory"),
    (["record", "--model", "M", "--prompts", "P", "--out", "{D}"], "not a trace"),
    (["record", "--model", "M", "--prompts", "N", "--out", "{D}/t"], "no such file"),
    (["record", "--model", "M", "--prompts", "F", "--out", "{D}/t"], "file.txt"),
    (["record", "--model", "N", "--prompts", "P", "--out", "{D}/t"], "no such directory"),
    (["record", "--model", "F", "--prompts", "P", "--out", "{D}/t"], "not a directory"),
    (["record", "--model", "E", "--prompts", "P", "--out", "{D}/t"], "no config.json"),
    (["record", "--model", "gpt-9", "--prompts", "P", "--out", "{D}/t"], "unknown model name"),
    (["record", "--model", "M", "--draft", "early-exit:99", "--prompts", "P", "--out", "{D}/t"], "early-exit:99"),
    (["record", "--model", "M", "--draft", "N", "--prompts", "P", "--out", "{D}/t"], "--draft"),
    (["record", "--model", "M", "--prompts", "P"], "missing option"),
    (["tiny", "--family", "llama", "--out", "{D}/tiny"], "unknown family"),
    (["tiny", "--family", "qwen3_moe", "--out", "F"], "file.txt"),
    (["tiny", "--family", "qwen3_moe", "--out", "{D}/tiny", "--seed", "x"], "--seed"),
    (["frobnicate"], "no such command"),
]


@pytest.fixture(scope="module")
def model_paths(paths, tmp_path_factory) -> dict[str, str]:
    from tracer.tiny import write_tiny

    pair = write_tiny("qwen3_moe", tmp_path_factory.mktemp("tiny") / "pair")
    return dict(paths, M=str(pair))


def _tracer(argv: list[str], capsys) -> tuple[int, str]:
    from tracer.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
        raise SystemExit(0)
    return e.value.code, capsys.readouterr().err


@needs_torch
@pytest.mark.parametrize("args,needle", TRACER, ids=_ids(TRACER))
def test_tracer_refuses_in_one_line(model_paths, capsys, args, needle):
    _clear(model_paths["D"])
    code, err = _tracer(_subst(args, model_paths), capsys)
    _one_line(code, err, "tracer", needle)
    _nothing_written(model_paths["D"])


# ========================================================================================== validate

# validate/ is being finished elsewhere; these two are reported, not fixed here: `validate run` checks
# the predictor name and --max-new-tokens only after it has started recording (and, for the
# predictor, calibrating), so progress lines precede the error and the run directory is written.

VALIDATE = [
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--tokens", "1,a"], "--tokens"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--tokens", "0"], "--tokens"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--contexts", "-1"], "--contexts"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--levels", "0"], "levels"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--repeats", "0"], "repeats"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--overlap", "both"], "--overlap"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--clock", "sundial"], "--clock"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--device", "tpu"], "--device"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--threads", "0"], "--threads"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--dtype", "int8"], "--dtype"),
    (["calibrate", "--model", "N", "--out", "{D}/p.json"], "no such directory"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--trace", "N"], "no-such-path"),
    (["calibrate", "--model", "M", "--out", "{D}/p.json", "--prompts", "N"], "no-such-path"),
    (["run", "--model", "M", "--out", "{D}/r"], "--winner"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--winner", "N"], "no-such-path"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--winner", "J"], "--winner"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--winner", "L"], "JSON object"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--winner", "J", "--policy", "ar"], "not both"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "greedy"], "greedy"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "confidence", "--budget", "-1"], "budget"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ecospec", "--lambda", "-1"], "lambda"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ecospec", "--predictor", "psychic"], "psychic"),
    # k-fold predictors need 2 requests: refused before recording, loading or calibrating anything
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ecospec", "--predictor", "token"], "--prompts holds 1 request;"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ecospec", "--max-prompts", "1"], "--max-prompts 1 holds 1 request;"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ecospec", "--score", "vibes"], "vibes"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ar", "--calib-tokens", "x"], "--calib-tokens"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ar", "--overlap", "both"], "--overlap"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ar", "--hardware", "N"], "no-such-path"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ar", "--trace", "N"], "no-such-path"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ar", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["run", "--model", "M", "--prompts", "P", "--out", "{D}/r", "--policy", "ar", "--repeats", "0"], "repeats"),
    (["report", "N"], "no such run directory"),
    (["report", "E"], "E"),
    (["report", "E", "--hardware", "N"], "no such profile"),
    (["frobnicate"], "no such command"),
]


@needs_torch
@pytest.mark.parametrize("args,needle", VALIDATE, ids=_ids(VALIDATE))
def test_validate_refuses_in_one_line(model_paths, capsys, args, needle):
    from validate.cli import main

    argv = _subst(args, model_paths)
    if needle == "E":
        needle = model_paths["E"]
    _clear(model_paths["D"])
    code = main(argv)
    _one_line(code, capsys.readouterr().err, "validate", needle)
    _nothing_written(model_paths["D"])


# ======================================================================================= subprocesses

SUBPROCESS = [
    ("ecosim", ["replay", "T", "--bw", "3.3XB/s"], "unknown unit"),
    ("ecosim", ["sweep", "T", "--out", "{D}/o", "--lambda", "0:1:0"], "positive step"),
    ("ecosim", ["check", "N"], "no such file"),
    ("ecosim", ["synth", "{D}/s", "--model", "gpt-9"], "unknown model"),
    ("tracer", ["tiny", "--family", "llama", "--out", "{D}/tiny"], "unknown family"),
    ("tracer", ["record", "--model", "x", "--prompts", "P", "--out", "{D}/t", "--depth", "abc"], "--depth"),
    ("validate", ["report", "N"], "no such run directory"),
]


@pytest.mark.parametrize("prog,args,needle", SUBPROCESS, ids=[f"{p} {' '.join(a)}" for p, a, _ in SUBPROCESS])
def test_console_scripts_refuse_in_one_line(paths, prog, args, needle):
    if prog != "ecosim" and not HAS_TORCH:
        pytest.skip("needs torch")
    exe = Path(sys.executable).parent / prog
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", {"ecosim": "ecosim.cli", "tracer": "tracer.cli",
                                                                   "validate": "validate.cli"}[prog]]
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    r = subprocess.run(cmd + _subst(args, paths), capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    _one_line(r.returncode, r.stderr, prog, needle)
    assert r.stdout == ""
