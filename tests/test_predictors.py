"""Expert predictors: training, request splits, files, metrics and the `ecosim predictor` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecosim.catalog.models import get_model
from ecosim.cli import main
from ecosim.errors import EcoSimError
from ecosim.predictors import Selection, get_predictor
from ecosim.metrics import Row
from ecosim.predictors.base import Candidates, NoPredictor, OraclePredictor, top_ids
from ecosim.analysis.predictor_compare import Outcome, Point, best_point, compare, gains
from ecosim.predictors.evaluate import evaluate
from ecosim.predictors.kfold import KFoldPredictor
from ecosim.predictors.store import load, save
from ecosim.predictors.train import TrainingRows, split_requests, train
from ecosim.predictors.view import draft_view, request_mask
from ecosim.sweep.grid import Pricing
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import Trace, read_trace

SHAPE = replace(get_model("mixtral-8x7b"), name="tiny-moe", num_layers=4, moe_layers=(0, 1, 2, 3), num_experts=16, top_k=2)
SMALL = dict(requests=6, positions=40, depth=4, topk=3, max_nodes=12, active_vocab=50)
CONTEXT = dict(dim=4, epochs=2, batch=256)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("predictor-traces")
    cfgs = {
        "token": SynthConfig(**SMALL, token_affinity=1.0, parent_affinity=0.0, seed=3),
        "uniform": SynthConfig(**SMALL, skew=0.0, token_affinity=0.0, parent_affinity=0.0, seed=4),
        "mixed": SynthConfig(**SMALL, seed=5),
    }
    return {name: write_synthetic(root / name, SHAPE, cfg) for name, cfg in cfgs.items()}


def _heldout_recall(trace: Trace, kind: str, **opts: object) -> tuple[float, list[int], object]:
    pred, record = train([trace], kind, holdout=0.34, seed=0, **opts)
    held = record["traces"][0]["heldout_requests"]
    return evaluate(pred, trace, request_mask(trace, held)).report()["recall"], held, pred


# ------------------------------------------------------------------------------ what they learn


def test_token_affinity_one_routes_by_token_alone(traces: dict[str, Path]) -> None:
    t = read_trace(traces["token"])
    experts = t.experts_3d().reshape(len(t.nodes["token"]), -1)
    tokens = t.nodes["token"]
    for tok in np.unique(tokens):
        rows = experts[tokens == tok]
        assert (rows == rows[0]).all(), f"token {tok} routes differently across nodes"


def test_token_predictor_reaches_recall_one_when_routing_is_a_function_of_the_token(traces: dict[str, Path]) -> None:
    t = read_trace(traces["token"])
    recall, held, _ = _heldout_recall(t, "token")
    train_tokens = set(t.nodes["token"][~request_mask(t, held)].tolist())
    assert set(t.nodes["token"][request_mask(t, held)].tolist()) <= train_tokens  # every held-out token was seen
    assert recall == 1.0


def test_context_predictor_learns_token_routing_too(traces: dict[str, Path]) -> None:
    recall, _, _ = _heldout_recall(read_trace(traces["token"]), "context", **CONTEXT)
    assert recall > 0.95


def test_no_predictor_beats_freq_on_uniform_random_routing(traces: dict[str, Path]) -> None:
    t = read_trace(traces["uniform"])
    freq, held, _ = _heldout_recall(t, "freq")
    k_over_e = SHAPE.top_k / SHAPE.num_experts
    assert abs(freq - k_over_e) < 0.03
    slots = int(request_mask(t, held).sum()) * SHAPE.num_moe_layers * SHAPE.top_k
    noise = 4 * np.sqrt(k_over_e * (1 - k_over_e) / slots) + 0.01  # slots are not independent (tree twins)
    for kind, opts in (("token", {}), ("context", CONTEXT)):
        recall, _, _ = _heldout_recall(t, kind, **opts)
        assert recall <= freq + noise, f"{kind} {recall} vs freq {freq} on routing that carries no signal"


def test_token_beats_freq_when_routing_follows_tokens(traces: dict[str, Path]) -> None:
    t = read_trace(traces["mixed"])
    assert _heldout_recall(t, "token")[0] > _heldout_recall(t, "freq")[0] + 0.1


# ------------------------------------------------------------------------------ splits


def test_split_is_by_request_and_seeded(traces: dict[str, Path]) -> None:
    ts = [read_trace(traces[n]) for n in ("token", "uniform", "mixed")]
    for holdout in (0.1, 0.25, 0.5, 0.9):
        split = split_requests(ts, holdout, seed=7)
        assert split == split_requests(ts, holdout, seed=7)
        n_out = 0
        for t, (tr, ho) in zip(ts, split):
            assert not set(tr) & set(ho)
            assert sorted(tr + ho) == sorted(r["request_id"] for r in t.manifest["requests"])
            n_out += len(ho)
        assert n_out == max(1, round(holdout * 18))
    with pytest.raises(EcoSimError):
        split_requests(ts, 1.0, 0)


def test_training_rows_never_include_a_held_out_request(traces: dict[str, Path]) -> None:
    t = read_trace(traces["mixed"])
    (tr, ho), = split_requests([t], 0.34, 0)
    data = TrainingRows.gather([(t, request_mask(t, tr))])
    assert len(data) == int(request_mask(t, tr).sum())
    assert len(np.unique(data.unit)) == len(tr)
    held_tokens = t.nodes["token"][request_mask(t, ho)]
    assert len(data) + len(held_tokens) == len(t.nodes["token"])


def test_on_the_fly_kinds_never_see_the_request_they_predict(traces: dict[str, Path]) -> None:
    """Scrambling one request's routing leaves that request's predictions unchanged."""
    t = read_trace(traces["mixed"])
    kf = KFoldPredictor("token", folds=3)
    before = kf.predict(t)
    target = 2
    rows = request_mask(t, [target])
    perm = np.random.default_rng(0).permutation(SHAPE.num_experts).astype(np.int16)
    nodes = dict(t.nodes, experts=t.nodes["experts"].copy())
    nodes["experts"][rows] = perm[nodes["experts"][rows]]
    scrambled = Trace(t.path, t.manifest, t.positions, nodes)
    after = KFoldPredictor("token", folds=3).predict(scrambled)
    assert np.array_equal(before[rows], after[rows])
    assert not np.array_equal(before[~rows], after[~rows])  # the other folds did learn from it


def test_single_request_trace_cannot_be_predicted_leave_requests_out(tmp_path: Path) -> None:
    one = read_trace(write_synthetic(tmp_path / "one", SHAPE, SynthConfig(**{**SMALL, "requests": 1})))
    with pytest.raises(EcoSimError, match="at least 2"):
        get_predictor("token").predict(one)


# ------------------------------------------------------------------------------ files and interface


@pytest.mark.parametrize("kind,selection", [("freq", Selection()), ("token", Selection()), ("context", Selection()),
                                            ("token", Selection(mass=0.6, max_size=5)), ("context", Selection(k=3))])
def test_saved_predictors_load_back_to_identical_predictions(traces: dict[str, Path], tmp_path: Path, kind: str,
                                                             selection: Selection) -> None:
    t = read_trace(traces["mixed"])
    opts = CONTEXT if kind == "context" else {}
    pred, record = train([t], kind, 0.34, 0, selection, **opts)
    first = pred.predict(t)
    path = save(tmp_path / "p.npz", pred, record)
    again = load(path)
    assert again.kind == kind and again.selection == selection and again.training == record
    assert np.array_equal(again.predict(t), first)
    assert np.array_equal(get_predictor(str(path)).predict(t), first)
    assert first.shape[2] == selection.width(SHAPE.num_experts, SHAPE.top_k)


def test_scores_are_distributions_and_selection_follows_them(traces: dict[str, Path]) -> None:
    t = read_trace(traces["mixed"])
    view = draft_view(t)
    rows = view.levels[1][:50]
    true = t.experts_3d()
    for kind, opts in (("freq", {}), ("token", {}), ("context", CONTEXT)):
        pred, _ = train([t], kind, 0.34, 0, **opts)
        predicted = pred.predict(t)
        c = view.candidates(rows, true, predicted)
        s = pred.scores(c)
        assert s.shape == (len(rows), SHAPE.num_moe_layers, SHAPE.num_experts)
        assert np.allclose(s.sum(axis=-1), 1.0, atol=1e-4) and (s >= 0).all()
        assert np.array_equal(np.sort(pred.select(c), axis=-1), np.sort(top_ids(s, SHAPE.top_k), axis=-1))


def test_selection_top_k_and_mass() -> None:
    s = np.array([[[0.5, 0.1, 0.3, 0.1]]], dtype=np.float32)
    assert Selection(k=2).apply(s, 2).tolist() == [[[0, 2]]]
    assert Selection(mass=0.75).apply(s, 2).tolist() == [[[0, 2, -1, -1]]]
    assert Selection(mass=0.8).apply(s, 2).tolist() == [[[0, 2, -1, -1]]]
    assert Selection(mass=0.81, max_size=3).apply(s, 2)[0, 0, :3].tolist()[:2] == [0, 2]
    assert (Selection(mass=0.81, max_size=3).apply(s, 2) >= 0).sum() == 3
    with pytest.raises(EcoSimError):
        Selection(k=2, mass=0.5)


def test_candidates_gather_parents_lazily() -> None:
    calls = []
    c = Candidates(np.array([1]), np.array([2]), np.array([1]), lambda: calls.append(1) or np.zeros((1, 1, 1), np.int16),
                   np.zeros((1, 1, 1), np.int16))
    assert not calls
    c.parent_experts
    c.parent_experts
    assert calls == [1]


def test_bounds_oracle_and_none(traces: dict[str, Path]) -> None:
    t = read_trace(traces["mixed"])
    mask = request_mask(t, [0, 1])
    o = evaluate(OraclePredictor(), t, mask).report()
    assert o["recall"] == 1.0 and o["precision"] == 1.0 and o["marginal"]["mae"] == 0.0
    n = evaluate(NoPredictor(), t, mask).report()
    assert n["recall"] == 0.0 and n["precision"] is None and n["marginal"]["predicted_mean"] == 0.0


def test_marginal_cost_by_hand(tmp_path: Path) -> None:
    """A root and a chain of two children, one layer, top-2 of 4 experts."""
    from ecosim.trace.io import write_trace

    shape = replace(SHAPE, num_layers=1, moe_layers=(0,), num_experts=4, top_k=2)
    nodes = {
        "request_id": np.zeros(3, np.int32), "pos": np.zeros(3, np.int32), "node": np.arange(3, dtype=np.int16),
        "parent": np.array([-1, 0, 1], np.int16), "depth": np.arange(3, dtype=np.int8),
        "token": np.array([5, 6, 7], np.int32), "draft_logprob": np.array([0, -0.1, -0.2], np.float32),
        "target_next": np.array([6, 7, 8], np.int32), "target_logprob": np.array([np.nan, -0.1, -0.1], np.float32),
        "experts": np.array([[0, 1], [1, 2], [2, 3]], np.int16),
    }
    positions = {"request_id": np.zeros(1, np.int32), "pos": np.zeros(1, np.int32), "context_len": np.ones(1, np.int32),
                 "n_nodes": np.array([3], np.int16)}
    manifest = {"model": shape.to_manifest(), "draft": {"name": "d", "params": 0, "bytes": 0},
                "tree": {"depth": 2, "topk": 1, "max_nodes": 2}, "requests": [{"request_id": 0, "task": "qa", "positions": 1}]}
    t = read_trace(write_trace(tmp_path / "hand", manifest, positions, nodes))
    m = evaluate(OraclePredictor(), t, np.ones(3, bool)).report()["marginal"]
    # node 1 brings {2} (1 is in the root's {0, 1}); node 2 brings {3} (2 is in {0, 1, 2}).
    assert m["candidates"] == 2 and m["true_mean"] == 1.0


# ------------------------------------------------------------------------------ CLI


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_train_eval_replay_end_to_end(traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "tok.npz"
    code, out, err = _run(["predictor", "train", str(traces["mixed"]), "--kind", "token", "--out", str(f),
                           "--holdout", "0.34", "--json"], capsys)
    assert code == 0, err
    trained = json.loads(out)
    record = trained["training"]["traces"][0]
    assert f.is_file() and trained["kind"] == "token"
    assert not set(record["train_requests"]) & set(record["heldout_requests"])

    code, out, err = _run(["predictor", "eval", str(f), str(traces["mixed"]), "--json"], capsys)
    assert code == 0, err
    ev = json.loads(out)
    row = ev["traces"][0]
    assert row["split"] == "held out" and row["requests"] == record["heldout_requests"]
    assert 0.0 < ev["total"]["recall"] <= 1.0 and len(row["per_layer"]["recall"]) == SHAPE.num_moe_layers
    assert row["us_per_candidate"] > 0 and "mae" in row["marginal"]
    assert "warning" not in err  # held-out requests only: nothing in-sample

    code, out, err = _run(["predictor", "eval", "oracle", str(traces["mixed"]), "--split-from", str(f), "--json"], capsys)
    assert code == 0 and json.loads(out)["traces"][0]["requests"] == record["heldout_requests"]

    code, out, err = _run(["predictor", "eval", "token", str(traces["mixed"]), "--split-from", str(f), "--json"], capsys)
    row = json.loads(out)["traces"][0]
    assert code == 0 and row["requests"] == record["heldout_requests"] and row["split"] == "held out, leave-requests-out"

    code, out, err = _run(["predictor", "eval", str(f), str(traces["mixed"]), "--all-requests", "--json"], capsys)
    assert code == 0 and "in-sample" in err

    code, out, err = _run(["predictor", "eval", str(f), str(traces["token"]), "--json"], capsys)  # never seen: all requests
    assert code == 0 and json.loads(out)["traces"][0]["split"] == "not in training"
    code, out, err = _run(["predictor", "eval", str(f), str(traces["token"]), str(traces["mixed"])], capsys)  # the table
    assert code == 0 and "recall" in out and "total" in out

    for predictor in (str(f), "token"):
        code, out, err = _run(["replay", str(traces["mixed"]), "--policy", "ecospec", "--predictor", predictor, "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["totals"][0]["tokens"] == SMALL["requests"] * SMALL["positions"]


def test_train_on_a_folder_then_eval_on_it_scores_every_held_out_request_and_names_the_skipped(
        tmp_path: Path) -> None:
    """The first thing anyone does, on the committed traces, as a user runs it: train on `traces/`,
    evaluate on `traces/`. Every request held out (of any trace) is scored; a trace the draw held out
    none of is skipped and named in one line; --unheld-in-sample scores it in-sample instead."""
    root = Path(__file__).resolve().parent.parent

    def ecosim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=root, timeout=600)

    f = tmp_path / "P.npz"
    r = ecosim("predictor", "train", "traces/", "--kind", "token", "--out", str(f), "--json")
    assert r.returncode == 0, r.stderr
    record = {t["name"]: t for t in json.loads(r.stdout)["training"]["traces"]}
    held = {n: t["heldout_requests"] for n, t in record.items() if t["heldout_requests"]}
    none = sorted(set(record) - set(held))
    assert held and none  # seed 0 on the committed traces: eagle3-qa's four requests are all trained on

    r = ecosim("predictor", "eval", str(f), "traces/", "--json")
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    assert {t["trace"]: t["requests"] for t in ev["traces"]} == held
    assert all(t["split"] == "held out" for t in ev["traces"])
    assert [s["trace"] for s in ev["skipped"]] == none
    assert ev["total"]["rows"] == sum(t["rows"] for t in ev["traces"]) and 0.0 < ev["total"]["recall"] < 1.0
    (line,) = [x for x in r.stderr.splitlines() if "skipped" in x]
    assert all(n in line for n in none) and "warning" not in r.stderr  # nothing scored in-sample

    r = ecosim("predictor", "eval", str(f), "traces/")  # the table says the same in its last line
    assert r.returncode == 0, r.stderr
    assert "total" in r.stdout and f"skipped {len(none)} trace(s)" in r.stdout.replace("\n", " ")

    r = ecosim("predictor", "eval", str(f), *(f"traces/{n}" for n in none), "--unheld-in-sample", "--json")
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    assert [t["trace"] for t in ev["traces"]] == none and not ev["skipped"]
    assert all("in-sample" in t["split"] for t in ev["traces"]) and "in-sample" in r.stderr

    r = ecosim("predictor", "eval", str(f), *(f"traces/{n}" for n in none))  # nothing left to score: say so, exit 2
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--unheld-in-sample" in r.stderr


@pytest.mark.parametrize("argv,message", [
    (["predictor", "eval", "{tmp}/missing.npz", "{trace}"], "unknown predictor"),
    (["predictor", "eval", "{tmp}/junk.npz", "{trace}"], "not a predictor file"),
    (["predictor", "train", "{trace}", "--kind", "bogus", "--out", "{tmp}/x.npz"], "unknown predictor kind"),
    (["predictor", "train", "{tmp}/nowhere", "--kind", "token", "--out", "{tmp}/x.npz"], "no such file"),
    (["predictor", "train", "{trace}", "--kind", "token", "--out", "{tmp}/x.npz", "--holdout", "1.5"], "holdout"),
    (["replay", "{trace}", "--policy", "ecospec", "--predictor", "{tmp}/missing.npz"], "unknown predictor"),
])
def test_cli_bad_input_is_one_line_and_exit_2(traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], message: str) -> None:
    (tmp_path / "junk.npz").write_text("not a zip")
    code, out, err = _run([a.format(tmp=tmp_path, trace=traces["mixed"]) for a in argv], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err


def test_predictor_for_another_shape_is_refused(traces: dict[str, Path], tmp_path: Path) -> None:
    pred, record = train([read_trace(traces["mixed"])], "freq", 0.34, 0)
    other = read_trace(write_synthetic(tmp_path / "other", replace(SHAPE, num_experts=8), SynthConfig(**SMALL)))
    with pytest.raises(EcoSimError, match="trained for"):
        pred.predict(other)


def test_ecosim_predictors_do_not_import_torch() -> None:
    code = "import sys, ecosim.predictors, ecosim.predictors.context, ecosim.analysis.predictor_compare, ecosim.cli.predictor; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------ compare (ecospec per predictor)

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



def test_only_the_oracle_reads_the_routing():
    from ecosim.predictors import BUILTIN, KINDS, reads_routing
    assert reads_routing("oracle") and OraclePredictor.reads_routing
    assert not any(reads_routing(n) for n in [*KINDS, "none", "models/some-file.npz", None])
    assert [n for n, cls in BUILTIN.items() if cls.reads_routing] == ["oracle"]
