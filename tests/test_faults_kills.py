"""Faults: `ecosim sweep` and `tracer record` SIGKILLed 50 times each, and `tracer record` stopped by Ctrl-C.

After every kill, what is on disk must be readable (a whole results.parquet or none; a valid trace
or none), nothing committed before may be lost, and resuming must end with exactly what an
uninterrupted run writes.

Each kill run is forked from a zygote (tests/fork_zygote.py) that imported everything once, so model
loading, planning, recording, committing and consolidating all happen in the forked child. Kills during the
imports themselves (which write nothing) are left to the existing kill tests (tests/test_sweep_resume.py,
tests/tracer/test_tracer_resume.py), which spawn fresh processes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import ROOT, assert_same_trace, tiny_trace
from fork_zygote import KILLS, Zygote
from ecosim.sweep.runner import KILL_AFTER_PART
from ecosim.trace.io import check_trace, write_trace


# ====================================================================================== ecosim sweep

GRID = ["--policy", "ar,confidence,ecospec", "--budget", "2,4", "--lambda", "0:1:0.5", "--predictor", "oracle",
        "--bw", "2TB/s,4.8TB/s", "--placement", "hbm,ep:2,offload:4"]


def _sweep_state(out: Path) -> tuple[set[str], pl.DataFrame | None]:
    """Committed configuration ids and the results file; every file there must read."""
    ids: set[str] = set()
    parts = out / "parts"
    if parts.is_dir():
        for f in parts.glob("*.parquet"):
            if not f.name.startswith("."):
                ids.update(pl.read_parquet(f)["config_id"].to_list())  # a part is whole or absent
    for name in ("sweep.json", "winner.json"):
        if (out / name).exists():
            json.loads((out / name).read_text())
    results = pl.read_parquet(out / "results.parquet") if (out / "results.parquet").exists() else None
    return ids, results


@pytest.mark.slow
def test_sweep_killed_50_times_then_resumed(tmp_path):
    d = tmp_path / "traces"
    traces = [write_trace(d / "a", *tiny_trace(21)), write_trace(d / "b", *tiny_trace(22, requests=3))]
    zygote = Zygote("ecosim", tmp_path)
    try:
        argv = lambda out: ["sweep", *map(str, traces), "--out", str(out), "--jobs", "1", *GRID]  # noqa: E731
        status, _, err, full = zygote.run(argv(tmp_path / "ref"), None)
        assert status == 0, err
        want = pl.read_parquet(tmp_path / "ref" / "results.parquet")
        assert want.height == 120

        # deterministic: each run dies right after committing its 1st or 2nd part (the runner's test
        # hook), so every run adds parts until the grid is done, whatever the machine's speed
        det = tmp_path / "det"
        committed: set[str] = set()
        det_kills = 0
        for i in range(KILLS):
            status, _, err, _ = zygote.run(argv(det), None, env={KILL_AFTER_PART: str(1 + i % 2)})
            ids, results = _sweep_state(det)
            assert ids >= committed, "a kill lost committed configurations"
            if status == 0:
                assert results is not None and results.equals(want)
                break
            assert status == -signal.SIGKILL and results is None, err
            assert len(ids) > len(committed), "a run after a resume committed nothing"
            det_kills += 1
            committed = ids
        assert det_kills >= 5, "the grid should take several runs of one or two parts"

        # random: anywhere in a run (planning, tasks, commits, consolidating), or not at all on a
        # fast machine: nothing is asserted about where they land, only what they leave
        out = tmp_path / "killed"
        rng = random.Random(20261210)
        kills, committed = 0, set()
        for _ in range(KILLS):
            status, landed, err, _ = zygote.run(argv(out), rng.uniform(0.0, 0.6 * full))
            kills += landed
            assert landed or status == 0, err
            ids, results = _sweep_state(out)
            assert ids >= committed, "a kill lost committed configurations"
            committed = ids
            if results is not None:  # written only whole, and only for the complete grid
                assert results.equals(want)
        status, _, err, _ = zygote.run(argv(out), None)
        assert status == 0, err
    finally:
        zygote.close()
    for d in (det, out):
        assert pl.read_parquet(d / "results.parquet").equals(want)  # identical to the uninterrupted sweep
        ids = [i for f in (d / "parts").glob("*.parquet") for i in pl.read_parquet(f)["config_id"].to_list()]
        assert len(ids) == len(set(ids)) == 120  # no configuration computed twice and committed twice
        assert not list((d / "parts").glob(".tmp-*"))
    print(f"ecosim sweep: {det_kills} kills right after a part, then {kills} of {KILLS} random kills landed "
          f"(one uninterrupted run: {full:.2f} s)")


# ====================================================================================== tracer record

TRACER_OPTS = ["--max-new-tokens", "10", "--depth", "2", "--topk", "2", "--max-nodes", "4", "--chunk", "2",
               "--threads", "1", "--quiet"]


PROMPTS = [
    {"task": "coding", "text": "def add(a, b):\n    return"},
    {"task": "qa", "text": "What does the with statement do?"},
    {"task": "dialogue", "input_ids": [1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53]},
]


def _check_kept(out: Path, before: dict[int, int]) -> tuple[dict[int, int], bool]:
    """After a kill: a whole trace or none; no committed position lost. Returns (positions, complete)."""
    if not out.exists():  # killed before the first commit: absent, nothing to lose
        assert not before
        return before, False
    m = check_trace(out)  # whatever the moment of the kill, what is there is a whole trace
    now = {r["request_id"]: r["positions"] for r in m["requests"]}
    assert all(now[r] >= n for r, n in before.items()), "a kill lost committed positions"
    return now, bool(m["recorded_on"]["complete"])


@pytest.mark.slow
def test_tracer_record_killed_50_times_then_resumed(tmp_path):
    """Kills at deterministic points (the recorder SIGKILLs itself right after its N-th commit,
    through the TRACER_TEST_KILL_AFTER_COMMIT hook), which do not depend on the machine's speed,
    then random kills (which may land anywhere, including mid-write, or not at all on a fast
    machine: nothing is asserted about where they land)."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        pytest.skip("tracer needs torch and transformers")
    from tracer.record import KILL_AFTER_COMMIT
    from tracer.tiny import write_tiny

    model = write_tiny("qwen3_moe", tmp_path / "tiny")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(x) + "\n" for x in PROMPTS))
    zygote = Zygote("tracer", tmp_path)
    try:
        argv = lambda out: ["record", "--model", str(model), "--prompts", str(prompts), "--out", str(out),  # noqa: E731
                            "--resume", *TRACER_OPTS]
        t0 = time.monotonic()
        status, _, err, full = zygote.run(argv(tmp_path / "ref"), None)
        assert status == 0, err

        # deterministic: each run resumes, commits once on start (nothing new), records a chunk or
        # two, and dies right after commit 2 or 3: every run adds positions until the trace is complete
        det = tmp_path / "det"
        before: dict[int, int] = {}
        det_kills, partial = 0, 0
        for i in range(KILLS):
            status, _, err, _ = zygote.run(argv(det), None, env={KILL_AFTER_COMMIT: str(2 + i % 2)})
            now, complete = _check_kept(det, before)
            if status == 0:
                assert complete
                break
            assert status == -signal.SIGKILL, err
            det_kills += 1
            if complete:  # killed right after the commit that marked it complete
                break
            assert sum(now.values()) > sum(before.values()), "a run after a resume made no progress"
            partial += 1
            before = now
        assert det_kills >= 5 and partial >= 5, "the kills should land while recording, after some commits"
        status, _, err, _ = zygote.run(argv(det), None)
        assert status == 0, err

        # random: anywhere in the run, including during a commit
        out = tmp_path / "killed"
        rng = random.Random(1210)
        before, kills = {}, 0
        for _ in range(KILLS):
            status, landed, err, _ = zygote.run(argv(out), rng.uniform(0.0, full * 0.5))
            kills += landed
            assert landed or status == 0, err
            before, _ = _check_kept(out, before)
        status, _, err, _ = zygote.run(argv(out), None)
        assert status == 0, err
        seconds = time.monotonic() - t0
    finally:
        zygote.close()
    for d in (det, out):
        assert check_trace(d)["recorded_on"]["complete"] is True
        assert_same_trace(d, tmp_path / "ref")  # the resumed trace equals the uninterrupted recording
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name], "a temporary was left behind"
    print(f"tracer record: {det_kills} kills right after a commit ({partial} left a partial trace), then {kills} of "
          f"{KILLS} random kills landed; {seconds:.1f} s (one uninterrupted run: {full:.2f} s)")


@pytest.mark.slow
def test_tracer_record_ctrl_c_says_what_was_committed_and_exits_130(tmp_path):
    """SIGINT right after the second commit (the recorder's test hook): exit 130, one line saying
    how many positions are on disk and the command that resumes; that command finishes the trace."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        pytest.skip("tracer needs torch and transformers")
    from tracer.record import KILL_AFTER_COMMIT
    from tracer.tiny import write_tiny

    model = write_tiny("qwen3_moe", tmp_path / "tiny")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(x) + "\n" for x in PROMPTS))
    out = tmp_path / "t"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", **{KILL_AFTER_COMMIT: "2:SIGINT"})
    cmd = [sys.executable, "-m", "tracer.cli", "record", "--model", str(model), "--prompts", str(prompts),
           "--out", str(out), *TRACER_OPTS]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 130, r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, err
    m = check_trace(out)
    committed = sum(q["positions"] for q in m["requests"])
    assert 0 < committed < 30 and not m["recorded_on"]["complete"]
    assert err[0].startswith(f"tracer: interrupted; {committed} of 30 positions committed to {out}"), err[0]
    again = err[0].split("to continue: ", 1)[1]
    assert again.endswith("--resume")
    del env[KILL_AFTER_COMMIT]
    import shlex

    r = subprocess.run([sys.executable, "-m", "tracer.cli", *shlex.split(again)[1:]], env=env, capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert check_trace(out)["recorded_on"]["complete"] is True
