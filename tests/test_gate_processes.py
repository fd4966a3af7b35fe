"""Processes: a sweep SIGKILLed while its worker processes run leaves none of them behind (each is found and
watched through /proc), so a killed run holds no CPU or memory after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from gate_cases import base_trace


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return base_trace(tmp_path_factory.mktemp("gate"))


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
