"""The Python API gives what the command line gives: `ecosim.replay` the rows of `replay --json`,
`ecosim.sweep` the rows of the sweep's results.parquet."""

from __future__ import annotations

import json

import numpy as np
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


def test_pooled_rows_are_the_totals_of_the_per_trace_rows(write):
    a, b = write(tiny_trace(6), "a"), write(tiny_trace(7), "b")
    df = ecosim.replay([a, b], policy="confidence", budget=4, bw="1TB/s")
    assert df["trace"].to_list() == ["a", "b", "total"]
    per, pooled = df.filter(pl.col("trace") != "total"), df.filter(pl.col("trace") == "total")
    for col in ("tokens", "steps", "expert_loads", "time_s"):
        assert pooled[col][0] == pytest.approx(per[col].sum())
    assert pooled["time_per_token_s"][0] == pytest.approx(per["time_s"].sum() / per["tokens"].sum())
    assert df.equals(ecosim.replay([a, b], policy="confidence", budget=4, bw=1e12))  # the text is exact
    one = ecosim.replay(a, policy="confidence", budget=4, bw=1e12, total=True)
    assert one["trace"].to_list() == ["a", "total"] and one["time_s"][0] == one["time_s"][1]
    assert ecosim.replay([a, b], policy="ar", total=False)["trace"].to_list() == ["a", "b"]


def test_step_times_is_the_cost_model_by_hand_under_experts_only():
    m = ecosim.model_shape("deepseek-v3.1")
    h200 = ecosim.devices()["h200"]
    experts = np.array([[8] * m.num_moe_layers, [64] * m.num_moe_layers])
    t = ecosim.step_times("deepseek-v3.1", "h200", experts, np.array([16, 16]), np.array([1024, 1024]),
                          cost=CostConfig(mode="experts-only"))
    assert t == pytest.approx(experts.sum(axis=1) * m.expert_bytes / h200.hbm_bw)  # sum of unions x bytes / bw
    full = ecosim.step_times(m, h200, experts, np.array([16, 16]), np.array([1024, 1024]))
    assert (full > t).all() and full[1] > full[0]
    assert ecosim.placement_of("offload:8").stateful and ecosim.placement_of("ep:4").devices == 4


def test_unions_grow_with_the_budget_and_one_token_reads_top_k(write):
    t = write(tiny_trace(8))
    root = ecosim.unions(t, "confidence", budget=0)
    tree = ecosim.unions(t, ecosim.PolicySpec("confidence", 8))
    assert root.columns[0] == "trace" and root.columns[-2:] == ["tokens", "experts_per_layer"] and root.height == 1
    assert tree["experts_per_layer"][0] > root["experts_per_layer"][0]
    assert root["tokens"][0] == 1.0 and 1.0 < tree["tokens"][0] <= 9.0  # the root alone; at most budget + root


def test_unions_of_several_policies_are_the_single_calls_in_order(write):
    t = write(tiny_trace(8))
    specs = [ecosim.PolicySpec("confidence", b) for b in (0, 2, 8)]
    both = ecosim.unions(t, specs)
    assert both["budget"].to_list() == [0, 2, 8]
    for i, spec in enumerate(specs):
        one = ecosim.unions(t, spec)
        assert both.row(i) == one.row(0)


def test_synthetic_is_write_synthetic_read_back(tmp_path):
    from ecosim.synth import SynthConfig, calibrated, write_synthetic

    knobs = dict(requests=1, positions=24, max_nodes=8, depth=3, seed=1)
    for preset, cfg in ((True, calibrated("olmoe-1b-7b", **knobs)), (False, SynthConfig(**knobs))):
        t = ecosim.synthetic("olmoe-1b-7b", preset=preset, name="x", **knobs)
        ref = ecosim.read_trace(write_synthetic(tmp_path / f"x{preset}", ecosim.model_shape("olmoe-1b-7b"), cfg))
        assert t.name == "x" and t.provenance == "synthetic"
        assert np.array_equal(t.experts_3d(), ref.experts_3d())


def test_synthetic_with_routing_is_a_hybrid_trace():
    from ecosim.routing.data import trace_continuation

    real = trace_continuation(ecosim.synthetic("olmoe-1b-7b", requests=2, positions=32, max_nodes=8, depth=3, seed=1))
    h = ecosim.synthetic("olmoe-1b-7b", routing=real, requests=2, positions=16, max_nodes=8, depth=3, seed=1)
    assert h.provenance == "hybrid"


def test_routing_stats_of_a_trace_are_its_continuations(write):
    from ecosim.routing import stats
    from ecosim.routing.data import trace_continuation

    t = ecosim.synthetic("olmoe-1b-7b", requests=2, positions=32, max_nodes=8, depth=3, seed=1)
    assert ecosim.routing_stats(t) == stats.routing_stats(trace_continuation(t), t)
    assert ecosim.routing_stats(t, trees=False) == stats.routing_stats(trace_continuation(t))
    assert ecosim.routing_stats(trace_continuation(t)) == stats.routing_stats(trace_continuation(t))


def test_scale_distinct_keeps_effective_tokens():
    g20, ds = ecosim.model_shape("gpt-oss-20b"), ecosim.model_shape("deepseek-v3.1")
    assert ecosim.scale_distinct(4.0, "gpt-oss-20b", ds) == pytest.approx(ds.top_k)  # one token: top-k anywhere
    assert ecosim.scale_distinct(7.5, g20, "gpt-oss-20b") == 7.5  # same shape: unchanged
    assert ecosim.scale_distinct(12.0, g20, ds) > ecosim.scale_distinct(8.0, g20, ds)


def test_the_package_re_exports_the_public_types():
    from ecosim.policies import PolicySpec
    from ecosim.trace.io import Trace

    assert ecosim.PolicySpec is PolicySpec and ecosim.Trace is Trace
    assert set(ecosim.__all__) <= set(dir(ecosim))


def test_compare_predictors_is_the_cli_json(write, capsys):
    t = write(tiny_trace(9, requests=3))
    doc = ecosim.compare_predictors(t, "freq,oracle", budget=4, lambdas=[0.0, 0.5], placements="hbm")
    assert main(["predictor", "compare", str(t), "--predictor", "freq,oracle", "--budget", "4", "--lambda", "0,0.5",
                 "--placement", "hbm", "--json"]) == 0
    def results(d):  # all but the timings of the predictors (seconds, microseconds per candidate)
        if isinstance(d, dict):
            return {k: results(v) for k, v in d.items() if not k.endswith(("seconds", "per_candidate"))}
        return [results(v) for v in d] if isinstance(d, list) else d

    assert results(json.loads(json.dumps(doc))) == results(json.loads(capsys.readouterr().out))
    tables = ecosim.predictor_tables(doc)
    assert tables and all(t.count("\n| ") >= 2 for t in tables)  # a header and at least one row each


def test_published_is_fidelity_as_data(monkeypatch):
    """ecosim.published gives what `ecosim fidelity` computes: the same results, constants and summary
    (on the plain rows of the fit set, to keep it quick; test_fidelity checks the whole table)."""
    from ecosim import fidelity
    from ecosim.catalog.serving import load_serving
    rows = [r for r in fidelity.load_rows() if r.get("sim") and r.get("fit") and r["metric"] in fidelity.PLAIN]
    monkeypatch.setattr(fidelity, "load_rows", lambda path=fidelity.PUBLISHED: rows)
    doc = ecosim.published("cuda-graphs")
    results, theta, skipped = fidelity.run(load_serving("cuda-graphs"), rows=rows)
    assert len(doc["results"]) == len(rows) >= 3
    assert [(r.row["id"], r.predicted) for r in doc["results"]] == [(r.row["id"], r.predicted) for r in results]
    assert list(doc["fitted"]) == list(fidelity.FREE) and list(doc["fitted"].values()) == [float(t) for t in theta]
    assert doc["summary"] == fidelity.summary(results) and doc["plain_metrics"] == fidelity.PLAIN
