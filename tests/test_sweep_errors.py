"""Bad sweep input as one line with exit 2: bad axis values, options and names, a missing trace, a folder that
is not a sweep, and Ray asked for but not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sweep_runs import cli, make_traces


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[Path]:
    return make_traces(tmp_path_factory.mktemp("sweep_traces"))


@pytest.mark.parametrize("extra, needle", [
    (["--lambda", "1:0:0.1"], "stops before it starts"),
    (["--lambda", "0:1:0"], "positive step"),
    (["--budget", "8,x"], "not a number"),
    (["--budget", "2.5"], "not an integer"),
    (["--bw", "3.3"], "not a quantity with a unit"),
    (["--placement", "hbm,disk"], "placement 'disk'"),
    (["--policy", "greedy"], "unknown policy"),
    (["--predictor", "psychic"], "psychic"),
    (["--hardware", "tpu9"], "tpu9"),
    (["--executor", "spark"], "--executor"),
    (["--objective", "joy"], "--objective"),
    (["--ray-address", "auto"], "--ray-address needs --executor ray"),
])
def test_bad_input_is_one_line_and_exit_2(traces, tmp_path, capsys, extra, needle):
    code, out, err = cli(capsys, "sweep", *map(str, traces), "--out", str(tmp_path / "x"), "--jobs", "1", *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("ecosim: error: ") and needle in err, err


def test_missing_trace_and_not_a_sweep_dir(tmp_path, capsys):
    code, _, err = cli(capsys, "sweep", str(tmp_path / "nope"), "--out", str(tmp_path / "x"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no such file" in err
    for cmd in ("pareto", "winner"):
        code, _, err = cli(capsys, cmd, str(tmp_path))
        assert code == 2 and len(err.strip().splitlines()) == 1 and "not a sweep directory" in err


def test_ray_missing_says_how_to_install(traces, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code, _, err = cli(capsys, "sweep", *map(str, traces), "--out", str(tmp_path / "x"), "--executor", "ray")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pip install" in err and "ray" in err
    assert not (tmp_path / "x").exists()
