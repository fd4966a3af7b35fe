"""Fuzz every command's entry, not only the readers: hypothesis drives `ecosim check`, `inspect`, `inspect
--routing`, `replay` (fast, streamed with --max-memory, and the event engine), `sweep` and `tune` on broken
inputs. The property, for every example: the command refused with the project's error (exit status 2, one line
on stderr) or it ran and every figure it printed is finite and non-negative. A traceback, an internal error
(exit 70) or a NaN, an infinity or a negative number in the output fails.

Inputs are mutated from a small valid trace and profile:
- traces: every mutation kind of tests/fuzz_kinds.py (damaged Parquet bytes, wrong types, dropped and repeated
  columns, nulls, broken trees, non-finite probabilities, manifest values of every wrong type, truncated and
  empty files, files that are not files), laid out and handed to one command;
- hardware and serving profiles: one field set to an odd value (wrong type, NaN, infinity, negative, zero,
  absurd), removed, or misspelled;
- arrival files and option values: odd numbers, units and words.

A few hundred examples run in the normal suite (about half a minute); `ECOSIM_FUZZ=thousands` runs ten times as
many. The runs are in-process (the CLI's own `main`), so an example costs a replay, not an interpreter start.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from fuzz_kinds import KINDS
from fuzz_kinds_manifest import ODD_VALUES
from fuzz_traces import Base, Case, lay_out

SCALE = 10 if os.environ.get("ECOSIM_FUZZ") == "thousands" else 1
FUZZ = dict(deadline=None, database=None, derandomize=SCALE == 1,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HW = json.loads((ROOT / "ecosim" / "catalog" / "data" / "hardware" / "h200.json").read_text())
SERVING = json.loads((ROOT / "ecosim" / "catalog" / "data" / "serving" / "eager.json").read_text())

# Odd values: the reader fuzzer's (wrong types, NaN, infinities, huge, strings, containers) and numbers near
# the edges of what a profile allows.
VALUES = st.one_of(st.sampled_from(ODD_VALUES), st.floats(allow_nan=True, allow_infinity=True),
                   st.integers(-(10**20), 10**20), st.sampled_from([1e-300, 5e-324, 1e15, 1e16, 0.5, 2.0, 1e12]))

_BASES: dict[bool, Base] = {}


def base(gates: bool) -> Base:
    if gates not in _BASES:
        _BASES[gates] = Base(11, gates)
    return _BASES[gates]


def _numbers(x: Any, where: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON document, with where it is."""
    if isinstance(x, bool) or x is None:
        return []
    if isinstance(x, (int, float)):
        return [(where, float(x))]
    if isinstance(x, dict):
        return [n for k, v in x.items() for n in _numbers(v, f"{where}.{k}")]
    if isinstance(x, list):
        return [n for i, v in enumerate(x) for n in _numbers(v, f"{where}[{i}]")]
    return []


# Fields of replay --json that are settings, not figures: they echo the input (a negative exponent, a cap).
SETTINGS = ("lambda", "budget")


def run(args: list[Any]) -> tuple[int, str, str]:
    from ecosim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def judge(args: list[Any], code: int, out: str, err: str, sweep: Path | None = None) -> None:
    """Refused in one line (exit 2), or ran with finite, non-negative figures."""
    what = " ".join(map(str, args))
    assert "Traceback" not in err, f"{what}: {err[-1500:]}"
    if code == 2:
        lines = [line for line in err.strip().splitlines() if not line.startswith("ecosim: warning: ")]
        assert len(lines) == 1 and lines[0].startswith("ecosim: error: "), f"{what}: not one line: {err[-1500:]}"
        return
    assert code == 0, f"{what}: exit {code}: {err[-1500:]}"
    if "--json" in args:
        doc = json.loads(out)
        bad = [(w, v) for w, v in _numbers(doc) if not (math.isfinite(v) and v >= 0) and not w.endswith(SETTINGS)]
        assert not bad, f"{what}: printed {bad[:5]}"
    else:
        assert not any(w in out.lower() for w in (" nan", " inf", "-inf")), f"{what}: printed {out[-1500:]}"
    if sweep is not None and (sweep / "results.parquet").is_file():
        import polars as pl

        df = pl.read_parquet(sweep / "results.parquet")
        for col, dtype in df.schema.items():
            if dtype.is_numeric() and col not in SETTINGS:
                v = df[col].drop_nulls().cast(pl.Float64).to_numpy()
                assert np.all(np.isfinite(v) & (v >= 0)), f"{what}: results column {col}: {v[:5]}"


COMMANDS = {
    "check": lambda t, d: ["check", t],
    "inspect": lambda t, d: ["inspect", t],
    "routing": lambda t, d: ["inspect", "--routing", t],
    "replay": lambda t, d: ["replay", t, "--json", "--policy", "confidence"],
    "replay-ecospec": lambda t, d: ["replay", t, "--json", "--policy", "ecospec", "--placement", "offload:4"],
    "streamed": lambda t, d: ["replay", t, "--json", "--policy", "confidence", "--max-memory", "1MB"],
    "des": lambda t, d: ["replay", t, "--json", "--engine", "des", "--policy", "confidence", "--arrivals", "together"],
    "sweep": lambda t, d: ["sweep", t, "--out", d / "sweep", "--policy", "ar,confidence", "--budget", "2", "--jobs", "1"],
    "tune": lambda t, d: ["tune", t],
}


def _fresh(d: Path) -> Path:
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


@settings(max_examples=240 * SCALE, **FUZZ)
@given(kind=st.sampled_from(sorted(k for k in KINDS if k != "not_files")), seed=st.integers(0, 2**32 - 1),
       gates=st.booleans(), command=st.sampled_from(sorted(COMMANDS)))
def test_every_command_refuses_a_broken_trace_or_prices_it_sanely(tmp_path, kind, seed, gates, command):
    d = _fresh(tmp_path / "case")
    case = KINDS[kind](np.random.default_rng(seed), base(gates))
    lay_out(case, d / "t")
    args = COMMANDS[command](d / "t", d)
    code, out, err = run(args)
    judge(args, code, out, err, d / "sweep")


def test_the_base_trace_runs_through_every_command(tmp_path):
    """The property can fail: every command runs on the valid base trace and prints figures (exit 0)."""
    for command, make in COMMANDS.items():
        d = _fresh(tmp_path / command)
        lay_out(Case(base(False)), d / "t")
        args = make(d / "t", d)
        code, out, err = run(args)
        assert code == 0, (command, err)
        judge(args, code, out, err, d / "sweep")


def _mutated(doc: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    key = data.draw(st.sampled_from(sorted(doc)))
    how = data.draw(st.sampled_from(["value", "value", "value", "drop", "misspell"]))
    if how == "drop":
        del doc[key]
    elif how == "misspell":
        doc[key[:-1] + "z"] = doc.pop(key)
    else:
        doc[key] = data.draw(VALUES)
    return doc


@settings(max_examples=80 * SCALE, **FUZZ)
@given(data=st.data(), which=st.sampled_from(["hardware", "serving", "hardware-serving"]))
def test_a_broken_profile_is_refused_or_priced_sanely(tmp_path, data, which):
    d = _fresh(tmp_path / "case")
    lay_out(Case(base(False)), d / "t")
    if which == "serving":
        doc, flag = _mutated(SERVING, data), "--profile"
    elif which == "hardware":
        doc, flag = _mutated(HW, data), "--hardware"
    else:  # a calibrated profile carrying its own serving terms, the terms broken
        doc, flag = dict(HW, serving=_mutated(SERVING, data)), "--hardware"
    (d / "p.json").write_text(json.dumps(doc, allow_nan=True))
    command = data.draw(st.sampled_from(["replay", "des", "sweep"]))
    args = {"replay": ["replay", d / "t", "--json", "--policy", "confidence"],
            "des": ["replay", d / "t", "--json", "--engine", "des", "--policy", "ar"],
            "sweep": ["sweep", d / "t", "--out", d / "sweep", "--policy", "confidence", "--budget", "2", "--jobs", "1"]}[command]
    args += [flag, d / "p.json"]
    code, out, err = run(args)
    judge(args, code, out, err, d / "sweep")


TEXT = st.text(alphabet=st.sampled_from("0123456789.-+eE:²٣ xKMGTBbs/µ,auto"), max_size=12)


@settings(max_examples=80 * SCALE, **FUZZ)
@given(data=st.data(), option=st.sampled_from(["--bw", "--peak", "--placement", "--budget", "--lambda", "--max-memory",
                                               "--arrivals", "--max-batch", "--link-bw", "--pcie-bw"]))
def test_an_odd_option_value_is_refused_or_priced_sanely(tmp_path, data, option):
    d = _fresh(tmp_path / "case")
    lay_out(Case(base(False)), d / "t")
    args: list[Any] = ["replay", d / "t", "--json", "--policy", "ecospec"]
    if option == "--arrivals":
        times = data.draw(st.lists(VALUES, min_size=0, max_size=4))
        (d / "a.json").write_text(json.dumps(times, allow_nan=True))
        args += ["--engine", "des", "--arrivals", d / "a.json"]
    elif option == "--max-batch":
        args += ["--engine", "des", "--max-batch", data.draw(TEXT)]
    elif option == "--max-memory":
        args += ["--max-memory", data.draw(st.one_of(TEXT, st.sampled_from(["1kB", "1B", "1PB", "1e30GB", "2GB"])))]
    elif option == "--placement":
        args += [option, data.draw(st.one_of(TEXT.map(lambda s: "ep:" + s), TEXT.map(lambda s: "offload:" + s),
                                              TEXT.map(lambda s: "tp:" + s + "+ep:2"), TEXT))]
    else:
        args += [option, data.draw(st.one_of(TEXT, st.sampled_from(["3.3TB/s", "1e30TB/s", "1B/s", "989TFLOP/s", "nan",
                                                                     "inf", "-1", "auto", "1e-30TB/s"])))]
    code, out, err = run(args)
    judge(args, code, out, err)
