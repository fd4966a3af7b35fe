"""Crash safety: any interruption leaves a valid trace; --resume finishes it exactly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tracer.record
from ecosim.trace.io import check_trace
from tracer.record import KILL_AFTER_COMMIT, RecordConfig, run_record

OPTS = dict(max_new_tokens=14, depth=3, topk=2, max_nodes=6, chunk=4, threads=1)


def _cfg(model: Path, prompts: Path, out: Path, **kw) -> RecordConfig:
    return RecordConfig(model=str(model), prompts=[prompts], out=out, progress=False, **{**OPTS, **kw})


@pytest.mark.parametrize("stop_after", [0, 5, 30])
def test_interrupted_then_resumed_equals_uninterrupted(stop_after, tiny_dirs, prompts_file, tmp_path, monkeypatch, same_trace):
    model = tiny_dirs["gpt_oss"]
    ref = run_record(_cfg(model, prompts_file, tmp_path / "ref"))
    real, calls = tracer.record.verify_tree, [0]

    def flaky(*a, **k):
        calls[0] += 1
        if calls[0] > stop_after:
            raise KeyboardInterrupt
        return real(*a, **k)

    out = tmp_path / "cut"
    with monkeypatch.context() as m:
        m.setattr(tracer.record, "verify_tree", flaky)
        with pytest.raises(KeyboardInterrupt) as e:
            run_record(_cfg(model, prompts_file, out))
    partial = check_trace(out)
    counts = [r["positions"] for r in partial["requests"]]
    assert f"interrupted; {sum(counts)} of " in str(e.value) and f"positions committed to {out}" in str(e.value)
    assert partial["recorded_on"]["complete"] is False
    assert sum(counts) <= stop_after and all(c % OPTS["chunk"] == 0 or c == OPTS["max_new_tokens"] for c in counts)
    with pytest.raises(tracer.record.TracerError, match="--resume"):
        run_record(_cfg(model, prompts_file, out))  # neither --resume nor --force
    with pytest.raises(tracer.record.TracerError, match="depth"):
        run_record(_cfg(model, prompts_file, out, resume=True, depth=2))
    calls[0] = 0
    with monkeypatch.context() as m:  # the resumed run never recomputes a committed position
        m.setattr(tracer.record, "verify_tree", lambda *a, **k: (calls.__setitem__(0, calls[0] + 1), real(*a, **k))[1])
        run_record(_cfg(model, prompts_file, out, resume=True))
    assert calls[0] == 3 * OPTS["max_new_tokens"] - sum(counts)
    same_trace(out, ref)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tiny_dirs, prompts_file, tmp_path, same_trace):
    """SIGKILL the recorder at a random moment of start-up, then right after a random number of
    its commits (the recorder's test hook, so the kills land whatever the machine's speed),
    resuming each time; after every kill `ecosim`'s checker accepts what is on disk; the end
    result equals an uninterrupted recording. (Kills at random moments mid-write: tests/test_faults_kills.py.)"""
    model = tiny_dirs["deepseek_v3"]
    opts = dict(OPTS, max_new_tokens=30, chunk=3)
    ref = run_record(_cfg(model, prompts_file, tmp_path / "ref", **opts))
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "tracer.cli", "record", "--model", str(model), "--prompts", str(prompts_file),
           "--out", str(out), "--resume", "--quiet"]
    for k, v in opts.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), HF_HUB_OFFLINE="1")
    rng = random.Random(1234)
    kills, before, partial = 0, 0, False
    for attempt in range(3):
        if attempt == 0:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.5, 2.0))  # probably still importing or loading (or not: nothing asserted)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            else:
                assert proc.returncode == 0, proc.stderr.read().decode()
        else:  # right after a random number of this run's commits
            hook = {KILL_AFTER_COMMIT: str(rng.randint(2, 6))}
            proc = subprocess.run(cmd, env={**env, **hook}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
            assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
            kills += 1
        if (out / "manifest.json").exists():
            m = check_trace(out)  # whatever the moment of the kill, the trace on disk is valid
            committed = sum(r["positions"] for r in m["requests"])
            assert committed >= before
            before = committed
            partial |= not m["recorded_on"]["complete"] and committed > 0
            if m["recorded_on"]["complete"]:
                break
    assert kills >= 2 and partial, "the kills should land while recording, after some commits"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert check_trace(out)["recorded_on"]["complete"] is True
    same_trace(out, ref)
