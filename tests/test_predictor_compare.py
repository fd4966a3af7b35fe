"""`ecosim predictor compare` (ecospec per predictor): the best lambda never loses to confidence and the oracle
keeps all its gain (hypothesis), ties and gain fractions by hand, and the JSON schema and Markdown of the command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecosim.metrics import Row
from ecosim.analysis.predictor_compare import Outcome, Point, best_point, compare, gains
from ecosim.sweep.grid import Pricing
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import read_trace
from predictor_traces import SHAPE, SMALL, _run, make_traces


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_traces(tmp_path_factory.mktemp("predictor-traces"))


PRICINGS = [Pricing("h200", None, "hbm"), Pricing("h200", 1e12, "offload:4:lru")]  # 1 TB/s under offload


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.integers(0, 12), lams=st.lists(st.floats(0.0, 3.0), max_size=3))
def test_compare_best_lambda_never_loses_to_confidence_and_the_oracle_keeps_all_its_gain(
        tmp_path_factory: pytest.TempPathFactory, seed: int, budget: int, lams: list[float]) -> None:
    path = write_synthetic(tmp_path_factory.mktemp("cmp") / "t", SHAPE, SynthConfig(**{**SMALL, "requests": 3, "positions": 24, "seed": seed}))
    (g,) = compare([read_trace(path)], ["freq", "token", "oracle"], budget, [0.0, *lams], PRICINGS, folds=3)
    assert g.recall["oracle"].report()["recall"] == 1.0
    for res in g.pricings:
        conf = res.confidence
        for o in res.outcomes:
            zero = next(p for p in o.curve if p.lam == 0.0).row  # lambda 0 selects exactly what confidence does
            assert (zero.steps, zero.tokens, zero.expert_loads, zero.time_s) == (conf.steps, conf.tokens, conf.expert_loads, conf.time_s)
            assert o.best == best_point(o.curve) and o.best.row.time_per_token_s <= conf.time_per_token_s
            assert o.gain_s >= 0.0
        oracle = next(o for o in res.outcomes if o.predictor == "oracle")
        if res.oracle_gain_s is not None and res.oracle_gain_s > 0:
            assert oracle.kept == 1.0 and res.note is None
            assert all(o.kept is not None and o.kept >= 0.0 for o in res.outcomes)
        else:
            assert res.note and "gains nothing" in res.note and all(o.kept is None for o in res.outcomes)


def _point(lam: float, time_s: float, tokens: int = 10) -> Point:
    return Point(lam, Row("t", "real", 1, tokens, 5, 9, 20, 20.0, 0.0, time_s))


def test_compare_best_lambda_ties_and_gain_fractions_by_hand() -> None:
    curve = [_point(0.0, 10.0), _point(0.3, 8.0), _point(0.1, 8.0), _point(0.5, 9.0)]
    assert best_point(curve).lam == 0.1  # least time; of equal times the smaller lambda
    conf = _point(0.0, 10.0).row
    outs = [Outcome(n, curve, _point(0.1, t), (10.0 - t) / 10) for n, t in (("oracle", 6.0), ("token", 8.0), ("freq", 10.0))]
    gain, note = gains(conf, outs)
    assert gain == pytest.approx(0.4) and note is None
    assert [o.kept for o in outs] == [1.0, pytest.approx(0.5), 0.0]
    flat = [Outcome(n, curve, _point(0.0, 10.0), 0.0) for n in ("oracle", "token")]
    gain, note = gains(conf, flat)
    assert gain == 0.0 and "gains nothing" in (note or "") and all(o.kept is None for o in flat)
    assert gains(conf, [Outcome("token", curve, curve[1], 0.2)])[1] == "no oracle predictor in the comparison: no fraction of its gain"


def test_cli_compare_json_schema_and_markdown(traces: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predictor", "compare", str(traces["mixed"]), "--predictor", "freq,oracle", "--lambda", "0,0.2", "--budget", "8",
            "--placement", "hbm,offload:4", "--folds", "3", "--recall-only", str(traces["token"])]
    code, out, err = _run([*argv, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"budget", "lambdas", "score", "folds", "definitions", "groups"}
    assert doc["budget"] == 8 and doc["lambdas"] == [0.0, 0.2] and doc["folds"] == 3
    replayed, recall_only = doc["groups"]
    assert recall_only["traces"] == ["token"] and recall_only["pricings"] == []
    assert set(replayed) == {"model", "synthetic", "top_k", "traces", "predictors", "pricings"} and replayed["synthetic"]
    for name in ("freq", "oracle"):
        r = replayed["predictors"][name]
        assert len(r["per_layer"]["recall"]) == SHAPE.num_moe_layers and set(r["by_trace"]) == {"mixed"}
        assert 0.0 <= r["recall"] <= 1.0
    assert [p["placement"] for p in replayed["pricings"]] == ["hbm", "offload:4:lru"]
    for p in replayed["pricings"]:
        assert {"hardware", "device", "hbm_bw", "placement", "ar", "confidence", "oracle_gain_s", "note", "ecospec"} <= set(p)
        assert {"tokens_per_step", "experts_per_step", "experts_per_token", "time_per_token_s"} <= set(p["confidence"])
        for e in p["ecospec"]:
            assert {"predictor", "best_lambda", "best", "gain_s", "kept", "experts_change", "tokens_change",
                    "speedup_vs_confidence", "curve"} <= set(e)
            assert [c["lambda"] for c in e["curve"]] == [0.0, 0.2] and e["best_lambda"] in (0.0, 0.2)
            assert set(e["curve"][0]) == {"lambda", "tokens_per_step", "experts_per_step", "experts_per_token", "time_per_token_s"}
    code, out, err = _run([*argv, "--markdown"], capsys)
    assert code == 0, err
    assert "| predictor | recall@2, synthetic tiny-moe (mixed)" in out and "|---|" in out and "best λ" in out
    code, out, err = _run([*argv, "--markdown", "--json"], capsys)
    assert code == 2 and "alternatives" in err
