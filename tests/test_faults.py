"""Faults: `ecosim sweep` and `tracer record` SIGKILLed 50 times each, and a full disk mid-write.

After every kill, what is on disk must be readable (a whole results.parquet or none; a valid trace
or none), nothing committed before may be lost, and resuming must end with exactly what an
uninterrupted run writes. A write that fails with ENOSPC midway must leave the previous trace (or
results file) byte for byte, no temporaries, and a one-line error.

Fifty fresh processes would spend most of their time importing (torch + transformers alone take
~5 s here), so each kill run is forked from a "zygote" process that imported everything once and
never ran any work: a fork starts in milliseconds and runs the real command-line entry point
(`ecosim.cli.main`, `tracer.cli.main`) with real arguments. The zygote only forks children on
request and reaps them when told to, so a pid the test kills is always its own (a zombie at worst).
Kills during the imports themselves (which write nothing) are left to the existing kill tests
(tests/test_sweep.py, tests/tracer/test_tracer_resume.py), which spawn fresh processes; model
loading, planning, recording, committing and consolidating all happen in the forked child.
"""

from __future__ import annotations

import errno
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
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, assert_same_trace, hand_trace, tiny_trace
from ecosim.cli import main as ecosim_main
from ecosim.errors import EcoSimError
from ecosim.sweep.runner import KILL_AFTER_PART
from ecosim.trace import write as trace_write
from ecosim.trace.io import check_trace, write_trace

KILLS = 50

ZYGOTE = r"""
import json, os, sys, traceback
kind = sys.argv[1]
if kind == "tracer":
    import torch
    torch.set_num_threads(1)
    import safetensors.torch, tokenizers, tracer.record, tracer.pair, tracer.tree, tracer.verify  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: F401
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: F401  (lazy modules, imported now)
    from tracer.cli import main as entry
else:
    import ecosim.cli.sweep, ecosim.cli.traces, ecosim.cli.replay, ecosim.cli.predictor, ecosim.cli.report  # noqa: F401
    import ecosim.sweep.runner, ecosim.sweep.tasks  # noqa: F401
    from ecosim.cli import main as _main
    def entry(argv):
        sys.exit(_main(argv))
print("ready", flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if "reap" in msg:
        _, status = os.waitpid(msg["reap"], 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"status": code}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.environ.update(msg.get("env", {}))
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        err = os.open(msg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(err, 2)
        code = 0
        try:
            entry(msg["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 99
        sys.stderr.flush()
        os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
"""


class Zygote:
    """A process that imported the commands once and forks a child per run."""

    def __init__(self, kind: str, tmp: Path):
        self.tmp = tmp
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, kind], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._read() == "ready"

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        return line.strip()

    def _send(self, msg: dict) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._read())

    def run(self, argv: list[str], kill_after: float | None, limit: float = 120.0,
            env: dict[str, str] | None = None) -> tuple[int, bool, str, float]:
        """Run `argv` in a fresh fork (with `env` added); SIGKILL it after `kill_after` s if still running.

        Returns (exit status, whether the kill landed, stderr, seconds it ran)."""
        err = self.tmp / "child.err"
        pid = self._send({"argv": argv, "stderr": str(err), "env": env or {}})["pid"]
        t0 = time.monotonic()
        deadline = t0 + (kill_after if kill_after is not None else limit)
        killed = False
        while True:  # poll without reaping: the pid stays ours (a zombie at worst) until reaped
            state = _proc_state(pid)
            if state in ("Z", None):
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                killed = kill_after is not None
                assert killed, f"{argv[0]} ran longer than {limit} s"
                break
            time.sleep(0.001)
        ran = time.monotonic() - t0
        status = self._send({"reap": pid})["status"]
        return status, killed and status == -signal.SIGKILL, err.read_text(), ran

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


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


# ====================================================================================== full disk


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
    args = ["sweep", str(trace), "--out", str(tmp_path / "sw"), "--jobs", "1", "--policy", "ar", "--budget", "2"]
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
