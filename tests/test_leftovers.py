"""Nothing left behind: a command leaves files only in its output, never in the home directory,
/tmp or the checkout, whether it finishes or is stopped by SIGTERM.

Each command runs in a subprocess with a temporary HOME and TMPDIR, so whatever it would leave
there is seen; /tmp itself is shared with other programs, so only the names this run would use
(`/tmp/ray`, Ray's default, and the pid-marked private folder) are checked there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, tiny_trace
from ecosim.trace.io import write_trace


def _env(tmp_path: Path) -> dict[str, str]:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_TMPDIR", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                                                             "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR")}
    return {**env, "HOME": str(home), "TMPDIR": str(tmp), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config")}


def _left(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _checkout() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True).stdout


@pytest.mark.slow
def test_a_local_ray_sweep_leaves_no_token_in_home_and_nothing_in_tmp(tmp_path):
    pytest.importorskip("ray")
    env = _env(tmp_path)
    trace = write_trace(tmp_path / "traces" / "a", *tiny_trace(21))
    had_ray_tmp = Path("/tmp/ray").exists()
    before = _checkout()
    proc = subprocess.Popen([sys.executable, "-m", "ecosim.cli", "sweep", str(trace), "--out", str(tmp_path / "out"),
                             "--executor", "ray", "--jobs", "2", "--policy", "ar,confidence", "--budget", "2,4"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert (tmp_path / "out" / "results.parquet").exists()
    assert _left(tmp_path / "home") == []  # no ~/.ray/auth_token
    assert _left(tmp_path / "tmp") == []
    assert not list(Path("/tmp").glob(f"ecosim-ray-{proc.pid}-*"))  # the session folder, removed
    assert Path("/tmp/ray").exists() == had_ray_tmp
    assert _checkout() == before


@pytest.mark.slow
def test_sigterm_to_report_leaves_no_kernel_connection_file(tmp_path):
    pytest.importorskip("papermill")
    env = _env(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "slow.py").write_text('# %% tags=["parameters"]\ntraces = out = validation = routing = ""\n'
                                     "# %%\nimport time\ntime.sleep(300)\n")
    before = _checkout()
    proc = subprocess.Popen([sys.executable, "-m", "ecosim.cli", "report", "--reports", str(reports), "--out",
                             str(tmp_path / "site"), "--traces", str(ROOT / "traces")],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not list((tmp_path / "tmp").rglob("*.json")) and not list((tmp_path / "home").rglob("*.json")):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the kernel never started"
        time.sleep(0.5)
    time.sleep(2)  # the kernel is up and running the notebook's cell
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _left(tmp_path / "home") == []  # no IPython profile, no runtime folder
    assert _left(tmp_path / "tmp") == []  # no kernel connection file
    assert _checkout() == before
