"""Expert predictors: what they learn, request splits, files and the predictor interface (scores, selections,
candidates, bounds, the marginal cost, which predictor reads the routing).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ecosim.errors import EcoSimError
from ecosim.predictors import Selection, get_predictor
from ecosim.predictors.base import Candidates, NoPredictor, OraclePredictor, top_ids
from ecosim.predictors.evaluate import evaluate
from ecosim.predictors.kfold import KFoldPredictor
from ecosim.predictors.store import load, save
from ecosim.predictors.train import TrainingRows, split_requests, train
from ecosim.predictors.view import draft_view, request_mask
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import Trace, read_trace
from predictor_traces import CONTEXT, SHAPE, SMALL, make_traces


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_traces(tmp_path_factory.mktemp("predictor-traces"))


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
    # the labels stay where they lie in the trace's routing (no copy of the training rows' experts)
    source, rows = data.labels()
    assert np.shares_memory(source, t.experts_3d()) and len(rows) == len(data)
    assert np.array_equal(data.experts, t.experts_3d()[request_mask(t, tr)])


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


@pytest.mark.parametrize("kind,selection", [("freq", Selection()), ("token", Selection()), ("context", Selection()),
                                            ("token", Selection(mass=0.6, max_size=5))])
def test_predicted_sets_are_the_predictions_held_once_per_token(traces: dict[str, Path], tmp_path: Path, kind: str,
                                                                 selection: Selection) -> None:
    """`predict_sets` gives every row the set `predict` gives it; a kind that predicts by token alone
    holds one set per (fold, token seen), not one per row; a trained file does the same."""
    t = read_trace(traces["mixed"])
    opts = CONTEXT if kind == "context" else {}
    sets = KFoldPredictor(kind, folds=3, selection=selection, **opts).predict_sets(t)
    assert np.array_equal(sets.dense(), KFoldPredictor(kind, folds=3, selection=selection, **opts).predict(t))
    assert sets.dense().shape == (len(t.nodes["node"]), SHAPE.num_moe_layers, selection.width(SHAPE.num_experts, SHAPE.top_k))
    distinct = len(np.unique(t.nodes["token"]))
    if kind == "context":  # conditioned on more than the token: one set per row
        assert sets.index is None
    else:
        assert len(sets.table) <= 3 * ((distinct + 1) if kind == "token" else 1)
    pred, record = train([t], kind, 0.34, 0, selection, **opts)
    assert np.array_equal(pred.predict_sets(t).dense(), pred.predict(t))


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


def test_only_the_oracle_reads_the_routing():
    from ecosim.predictors import BUILTIN, KINDS, reads_routing
    assert reads_routing("oracle") and OraclePredictor.reads_routing
    assert not any(reads_routing(n) for n in [*KINDS, "none", "models/some-file.npz", None])
    assert [n for n, cls in BUILTIN.items() if cls.reads_routing] == ["oracle"]
