"""Sweeps: the grid's axes read cleanly, every row equals `ecosim replay --json`'s, a local pool and Ray write the
same results file as the in-process run, results rows rebuild the metrics rows, and bad axis values are
EcoSimErrors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ecosim.cli import main
from ecosim.errors import EcoSimError
from ecosim.sweep import grid as g
from ecosim.sweep.results import row_of
from sweep_runs import GRID, _frame, cli, swept, traces  # noqa: F401 (the fixtures)


def test_ranges_include_their_stop_and_read_cleanly():
    lam = g.parse_axis("lambda", "0:2:0.05")
    assert len(lam) == 41 and lam[0] == 0.0 and lam[-1] == 2.0 and lam[3] == 0.15
    assert g.parse_axis("lambda", "0:1:0.3") == [0.0, 0.3, 0.6, 0.9]
    assert g.parse_axis("budget", "8,16,32,60") == [8, 16, 32, 60]
    assert g.parse_axis("budget", "8:32:8,8,60") == [8, 16, 24, 32, 60]
    assert g.parse_bandwidths("2TB/s,3.3TB/s") == [2e12, 3.3e12] and g.parse_bandwidths(None) == [None]
    assert g.parse_placements("hbm,ep:8,offload:64,offload:64:lru") == ["hbm", "ep:8", "offload:64:lru"]
    assert g.parse_policies("ecospec,ar") == ["ar", "ecospec"]


def test_unused_knobs_collapse_and_ar_oracle_are_always_there():
    grid = g.Grid(["confidence"], {"budget": [8, 16], "lam": [0.0, 1.0], "predictor": ["oracle"], "score": ["difference"]},
                  ["h200"], [None], ["hbm"])
    assert grid.selections() == [g.Selection("ar"), g.Selection("confidence", 8), g.Selection("confidence", 16),
                                 g.Selection("oracle")]


# ------------------------------------------------------------------------------------------ rows


def test_sweep_rows_equal_replay_json_rows(swept, traces, capsys):
    df = pl.read_parquet(swept / "results.parquet")
    assert df.height == 2 * 6 * (1 + 2 + 6 + 1) and df["config_id"].n_unique() == df.height
    keys = ["policy", "budget", "lambda", "predictor", "hbm_bw", "placement"]
    for sel in df.select(keys).unique(maintain_order=True).iter_rows(named=True):
        args = ["replay", *map(str, traces), "--json", "--policy", sel["policy"], "--bw", f"{sel['hbm_bw'] / 1e12:g}TB/s",
                "--placement", sel["placement"]]
        if sel["budget"] is not None:
            args += ["--budget", str(sel["budget"])]
        if sel["policy"] == "ecospec":
            args += ["--lambda", repr(sel["lambda"]), "--predictor", sel["predictor"]]
        code, out, err = cli(capsys, *args)
        assert code == 0, err
        # one row per (trace, policy); the label and draft time are the replay's presentation, not results columns
        want = [{k: v for k, v in r.items() if k not in ("label", "draft_time_s")} for r in json.loads(out)["rows"]]
        got = df.filter(*[pl.col(k).eq_missing(v) for k, v in sel.items()])
        assert got["trace_path"].to_list() == [str(t.resolve()) for t in traces]
        for w, r in zip(want, got.iter_rows(named=True)):
            assert {k: r[k] for k in w} == w, sel  # every field of the replay row, exactly


def test_local_pool_matches_in_process(swept, traces, tmp_path):
    code = main(["sweep", *map(str, traces), "--out", str(tmp_path / "pool"), "--jobs", "2", *GRID])
    assert code == 0
    assert (tmp_path / "pool" / "results.parquet").read_bytes() == (swept / "results.parquet").read_bytes()


@pytest.mark.slow
def test_ray_executor_gives_the_same_results_file(swept, traces, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    import shutil
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="ray")  # short (Ray's socket paths have a length limit), and removed: Ray
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)  # leaves its session logs in $RAY_TMPDIR (default /tmp/ray)
    try:
        code = main(["sweep", *map(str, traces), "--out", str(tmp_path / "ray"), "--executor", "ray", "--jobs", "2", *GRID])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert code == 0
    assert (tmp_path / "ray" / "results.parquet").read_bytes() == (swept / "results.parquet").read_bytes()


def test_raw_rows_rebuild_metrics_rows(swept):
    """results.parquet's derived columns are metrics.Row's, recomputed from its raw fields."""
    for rec in _frame(swept).head(20).iter_rows(named=True):
        d = row_of(rec).to_dict()
        assert all(rec[k] == d[k] for k in d if k not in ("speedup_vs_ar", "oracle_fraction"))


def test_errors_are_ecosim_errors():
    with pytest.raises(EcoSimError):
        g.parse_range("1:2:3:4", "lambda")
    assert np.isclose(g.parse_axis("lambda", "0.1:0.3:0.1")[-1], 0.3)
