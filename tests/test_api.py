"""The Python API gives what the command line gives: `ecosim.replay` the rows of `replay --json`,
`ecosim.sweep` the rows of the sweep's results.parquet."""

from __future__ import annotations

import json

import polars as pl
import pytest

import ecosim
from conftest import tiny_trace
from ecosim.cli import main
from ecosim.cost import CostConfig
from ecosim.errors import EcoSimError
from ecosim.policies import registry


def test_replay_rows_are_the_cli_json_rows(write, tmp_path, capsys):
    a, b = write(tiny_trace(1), "a"), write(tiny_trace(2), "b")
    df = ecosim.replay([a, b], hardware="b200", placement="offload:4", budget=6, lam=0.25, predictor="oracle",
                       cost=CostConfig(step_overhead_s=0.0))
    assert main(["replay", str(a), str(b), "--hardware", "b200", "--placement", "offload:4", "--budget", "6",
                 "--lambda", "0.25", "--predictor", "oracle", "--step-overhead", "0s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    knobs = ("policy", *(k.key for k in registry.knobs()), "label", "draft_time_s")  # every knob column

    def metrics(r: dict) -> dict:
        return {k: v for k, v in r.items() if k not in knobs}

    names = df["policy"].unique(maintain_order=True).to_list()
    assert names == [t["policy"] for t in doc["totals"]]
    for name in names:
        mine = df.filter(pl.col("policy") == name).drop(*knobs[:-1]).to_dicts()
        rows = [metrics(r) for r in doc["rows"] if r["policy"] == name]
        total = [metrics(r) | {"trace": "total"} for r in doc["totals"] if r["policy"] == name]
        assert mine == rows + total
    assert df.filter(pl.col("policy") == "confidence")["budget"].to_list() == [6, 6, 6]
    assert df.filter(pl.col("policy") == "ar")["budget"].null_count() == 3
    assert df.schema["lambda"] == pl.Float64 and df.height == len(registry.names()) * 3


def test_replay_takes_specs_and_one_policy(write):
    t = write(tiny_trace(3))
    one = ecosim.replay(t, policy=ecosim.policies.PolicySpec("ecospec", 4, 0.0, "oracle"))
    conf = ecosim.replay(t, policy="confidence", budget=4)
    assert one.height == conf.height == 1
    assert one["time_s"][0] == conf["time_s"][0]  # lambda 0 selects what confidence selects
    with pytest.raises(EcoSimError, match="unknown policy"):
        ecosim.replay(t, policy="greedy")


def test_sweep_rows_are_the_cli_sweep_rows(write, tmp_path):
    t = write(tiny_trace(4))
    df = ecosim.sweep(t, policy=["confidence", "ecospec"], budget=[2, 4], lam="0:1:0.5", predictor="oracle",
                      placement=["hbm", "offload:4"], cost=CostConfig(step_overhead_s=0.0), out=tmp_path / "api")
    assert main(["sweep", str(t), "--out", str(tmp_path / "cli"), "--jobs", "1", "--budget", "2,4", "--lambda", "0:1:0.5",
                 "--predictor", "oracle", "--placement", "hbm,offload:4", "--step-overhead", "0s"]) == 0
    assert df.equals(pl.read_parquet(tmp_path / "cli" / "results.parquet"))
    temp = ecosim.sweep(t, policy="confidence", budget=(2, 4))  # a temporary directory, removed
    assert temp.height == 4 and temp["policy"].to_list() == ["ar", "confidence", "confidence", "oracle"]


def test_to_pandas(write):
    pytest.importorskip("pandas")
    df = ecosim.replay(write(tiny_trace(5)), policy="ar")
    assert list(df.to_pandas().columns) == df.columns
