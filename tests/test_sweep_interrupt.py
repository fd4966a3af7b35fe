"""Ctrl-C during a sweep: exit 130 and one line saying how many configurations of the total are
done and the exact command that resumes; running that command finishes the sweep."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, tiny_trace
from ecosim.sweep.runner import KILL_AFTER_PART
from ecosim.trace.io import write_trace


def test_ctrl_c_says_done_of_total_and_the_command_that_resumes(tmp_path: Path):
    a = write_trace(tmp_path / "traces" / "a", *tiny_trace(21))
    b = write_trace(tmp_path / "traces" / "b", *tiny_trace(22, requests=3))
    out = tmp_path / "sweep dir"  # a path the printed command must quote
    argv = ["sweep", str(a), str(b), "--out", str(out), "--jobs", "1", "--policy", "ar", "--policy", "confidence",
            "--budget", "2,4,8"]
    env = {**os.environ, KILL_AFTER_PART: "2:SIGINT"}  # Ctrl-C right after the second part is committed
    r = subprocess.run([sys.executable, "-m", "ecosim.cli", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 130, r.stderr
    [line] = r.stderr.splitlines()
    m = re.fullmatch(r"ecosim: interrupted; (\d+) of (\d+) configurations done \(one per configuration and trace\), "
                     r"committed to (.+)/parts; resume with: (.+)", line)
    assert m, line
    done, total = int(m[1]), int(m[2])
    assert 0 < done < total and Path(m[3]) == out
    command = shlex.split(m[4])
    assert command == ["ecosim", *argv]  # the exact command, quoted for a shell
    r = subprocess.run([sys.executable, "-m", "ecosim.cli", *command[1:], "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["skipped"], summary["rows"]) == (done, total)
