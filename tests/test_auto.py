"""ecospec-auto (`ecospec --lambda auto`) worked by hand, then end to end.

The auto growth is called directly on tiny arrays (one MoE layer, 64 experts: one bitset word):
layer table F(u, n) = u seconds (1 s per expert read), other O(n) = 1 + 0.1 n seconds. End to end, a
replay of ecospec-auto is never slower than its own root choice, and `replay` and `tune` run it from the CLI.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import TINY, tiny_trace
from ecosim import bitsets
from ecosim.auto import PATIENCE, auto_order, auto_select, grow
from ecosim.policies.ecospec_auto import pricer, values
from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.marginal import layer_steps
from ecosim.placements import Hbm, parse_placement
from ecosim.policies import PolicySpec, select_confidence
from ecosim.replay import TraceReplay
from ecosim.trace.io import read_trace
from ecosim.tree import Trees
from ecosim.union_scale import union_scale


def run_grow(parent, value, experts, draft=0.0, layer=None, other=None):
    """best_k and pick order of one tree: `experts` a list of expert-id lists, one per node."""
    n = len(parent)
    layer = np.repeat(np.arange(65, dtype=np.float64)[:, None], n + 2, axis=1) if layer is None else layer
    other = (1.0 + 0.1 * np.arange(n + 2))[None, :] if other is None else other
    ids = np.full((n, 1, max(len(x) for x in experts)), -1, dtype=np.int16)
    for i, x in enumerate(experts):
        ids[i, 0, : len(x)] = x
    order = np.zeros(n, dtype=np.int64)
    best = np.zeros(1, dtype=np.int64)
    grow(np.array([0]), np.array([0]), np.array([n]), np.array(parent, dtype=np.int64), np.array(value, dtype=np.float64),
         np.log(np.maximum(value, 1e-300)), ids, np.full((1, 1), np.uint64(2**64 - 1)), layer, layer_steps(layer),
         other, draft, 0.0,
         np.zeros((0, 1, 1), dtype=np.uint64), order, best, PATIENCE)
    return int(best[0]), order


@pytest.mark.parametrize("shape", [(1, 3), (2, 3), (3, 1), (6, 4), (65, 9)])
def test_layer_steps_are_the_step_bounds_by_their_definition(shape):
    # lo / hi[i, j]: min / max over e > i of F(e + 1, j) - F(e, j); token[j]: min over e of F(e, j + 1) - F(e, j)
    layer = np.random.default_rng(shape[0]).random(shape).cumsum(axis=0).cumsum(axis=1)
    lo, hi, token = layer_steps(layer)
    E, T = shape
    for i in range(E):
        for j in range(T):
            d = [layer[e + 1, j] - layer[e, j] for e in range(i + 1, E - 1)]
            assert lo[i, j] == (min(d) if d else np.inf) and hi[i, j] == (max(d) if d else -np.inf)
    for j in range(T):
        assert token[j] == (min(layer[e, j + 1] - layer[e, j] for e in range(E)) if j < T - 1 else 0.0)


def test_auto_takes_a_pair_of_siblings_neither_of_which_pays_alone():
    # root {0}; a and b both wake expert 5, c wakes expert 9; each worth 0.5.
    # root alone: t = 1 + 1.1 = 2.1, rate 1/2.1 = 0.476
    # {a}:        t = 2 + 1.2 = 3.2, rate 1.5/3.2 = 0.469  (worse: a Dinkelbach step at 0.476 stops)
    # {a, b}:     t = 2 + 1.3 = 3.3, rate 2.0/3.3 = 0.606  (best)
    # {a, b, c}:  t = 3 + 1.4 = 4.4, rate 2.5/4.4 = 0.568
    best, order = run_grow([-1, 0, 0, 0], [1.0, 0.5, 0.5, 0.5], [[0], [5], [5], [9]])
    assert best == 2
    assert sorted(np.flatnonzero((order >= 0) & (order < best))) == [1, 2]
    assert 1.5 / 3.2 < 1 / 2.1 < 2.0 / 3.3  # the premise: neither alone beats the root, the pair does


def test_auto_stops_at_the_root_when_drafting_costs_more_than_it_returns():
    # the same tree with a 10 s draft: {a, b} = 2.0 / 13.3 = 0.150 < 1 / 2.1 (no draft at the root)
    best, order = run_grow([-1, 0, 0, 0], [1.0, 0.5, 0.5, 0.5], [[0], [5], [5], [9]], draft=10.0)
    assert best == 0
    # and with no draft and free nodes (each costs only its 0.1 s of compute), it takes the lot
    free = np.zeros((65, 6))
    best, _ = run_grow([-1, 0, 0, 0], [1.0, 0.5, 0.5, 0.5], [[0], [5], [5], [9]], layer=free)
    assert best == 3


def test_auto_matches_confidence_at_the_best_budget_when_experts_are_free(write):
    # Free experts: the growth order is confidence's and the kept prefix maximises
    # (1 + V_k) - lambda t_k with lambda the running rate (tokens over seconds of the steps chosen
    # before; the first tree's plain rate 1 / t_0), worked out here tree by tree.
    trace = read_trace(write(tiny_trace(11, requests=2, positions=30)))
    t = Trees(trace)
    value = np.exp(t.cum_logprob)  # raw values order nodes as confidence does
    n = int(t.n_nodes.max())
    draft, per_token = 0.3, 0.05
    free = np.zeros((TINY.num_experts + 1, n + 2))  # F(u, n) = 0: no expert costs anything
    other = 1.0 + per_token * np.arange(n + 2)
    order = np.zeros(t.n_rows, dtype=np.int64)
    best_k = np.zeros(t.n_trees, dtype=np.int64)
    masks = bitsets.device_masks(TINY.num_experts, 1)
    rate = np.zeros(2)
    grow(np.arange(t.n_trees), t.start, t.n_nodes, trace.nodes["parent"], value, t.cum_logprob, trace.experts_3d(),
         masks, free, layer_steps(free), np.repeat(other[None], t.n_trees, 0), draft, 0.0,
         np.zeros((0, TINY.num_moe_layers, masks.shape[1]), dtype=np.uint64), order, best_k, 0, None, None, None, rate)
    selected = auto_select(t, order, best_k)
    tokens, seconds = 0.0, 0.0
    for i in range(t.n_trees):
        rows = np.arange(t.start[i], t.start[i] + t.n_nodes[i])
        v = np.sort(value[rows][1:])[::-1]
        lam = tokens / seconds if seconds else 1 / other[1]
        times = [other[1]] + [other[k + 1] + draft for k in range(1, len(rows))]
        gains = [1 + v[:k].sum() for k in range(len(rows))]
        k_star = int(np.argmax([g - lam * x for g, x in zip(gains, times)]))
        assert best_k[i] == k_star
        conf = select_confidence(t, k_star)[rows]
        assert np.array_equal(selected[rows], conf), f"tree {i}"
        tokens, seconds = tokens + gains[k_star], seconds + times[k_star]
    assert rate == pytest.approx([tokens, seconds])
    assert best_k.min() > 0 and (best_k < t.n_nodes - 1).any()  # not degenerate: some prefixes are interior


def test_auto_prices_steps_at_the_running_rate_not_each_steps_own():
    # root {0}, a chain a {1} (worth 0.6) -> b {2} (worth 0.5); F(u) = u s, O(n) = 1 + 0.1 n s.
    # t(root) = 1 + 1.1 = 2.1, t({a}) = 2 + 1.2 = 3.2, t({a, b}) = 3 + 1.3 = 4.3.
    # Score (1 + V) - lambda t:
    #   lambda = 1/2.1 (no history: the plain rate): 0, 1.6 - 1.524 = 0.076, 2.1 - 2.048 = 0.052 -> {a}
    #   lambda = 5 (a fast history, 10 tokens in 2 s): -9.5, -14.4, -19.4 -> the root alone
    #   lambda = 0.2 (a slow one, 1 token in 5 s): 0.58, 0.96, 1.24 -> {a, b}
    # (each step's own best ratio, 1/2.1 = 0.476 < 1.6/3.2 = 0.5 > 2.1/4.3 = 0.488, is {a} whatever came before)
    parent, value, experts = [-1, 0, 1], [1.0, 0.6, 0.5], [[0], [1], [2]]
    layer = np.repeat(np.arange(65, dtype=np.float64)[:, None], 5, axis=1)
    other = (1.0 + 0.1 * np.arange(5))[None, :]
    ids = np.array([[[0]], [[1]], [[2]]], dtype=np.int16)

    def best_with(rate):
        order, bk = np.zeros(3, dtype=np.int64), np.zeros(1, dtype=np.int64)
        grow(np.array([0]), np.array([0]), np.array([3]), np.array(parent, dtype=np.int64), np.array(value), np.log([1.0, 0.6, 0.3]),
             ids, np.full((1, 1), np.uint64(2**64 - 1)), layer, layer_steps(layer), other, 0.0, 0.0, np.zeros((0, 1, 1), dtype=np.uint64), order, bk,
             0, None, None, None, rate)
        return int(bk[0])

    assert run_grow(parent, value, experts)[0] == best_with(np.zeros(2)) == 1
    assert best_with(np.array([10.0, 2.0])) == 0
    slow = np.array([1.0, 5.0])
    assert best_with(slow) == 2
    assert slow == pytest.approx([1.0 + 2.1, 5.0 + 4.3])  # the chosen step joins the running totals


def test_auto_does_not_give_up_before_the_draft_is_paid_for():
    # A 2 s draft and twelve nodes worth 0.3 each on free experts (F = 0, O(n) = 1 + 0.1 n):
    # with j nodes the score is 1 + 0.3 j - (1.1 + 0.1 j + 2) / 1.1 = -1.818 + 0.209 j against the
    # root's 0, so nothing beats the root before the ninth pick, more than PATIENCE (8) picks
    # without a better score; the growth must still get there, and take all twelve.
    k = 12
    parent = [-1] + [0] * k
    free = np.zeros((65, k + 3))
    best, _ = run_grow(parent, [1.0] + [0.3] * k, [[0]] * (k + 1), draft=2.0, layer=free)
    scores = [0.0] + [1 + 0.3 * j - (1.1 + 0.1 * j + 2) / 1.1 for j in range(1, k + 1)]
    assert max(scores[:PATIENCE + 1]) == 0.0 < scores[PATIENCE + 1]
    assert best == int(np.argmax(scores)) == k


def test_auto_gives_up_once_its_drafted_prefixes_stop_improving_below_the_root():
    # Twenty children of the root, each worth 0.4 and waking its own expert (F = u s, O(n) = 1 +
    # 0.1 n s, no draft): at lambda = 1 / t(root) = 1 / 2.1 each pick scores 0.4 - 1.1 / 2.1 = -0.124,
    # so the best drafted prefix is the first pick, below the root's 0, and it never improves. After
    # PATIENCE more picks the growth stops (9 picks), although taking everything left for free could
    # still beat the root until the 16th (1 + 0.4 * 20 - (2.1 + 1.1 k) / 2.1 > 0 for k < 15.3).
    k = 20
    best, order = run_grow([-1] + [0] * k, [1.0] + [0.4] * k, [[0]] + [[e] for e in range(1, k + 1)])
    assert best == 0
    picked = np.flatnonzero((order >= 0) & (order < k + 1))
    assert len(picked) == PATIENCE + 1 and sorted(order[picked]) == list(range(PATIENCE + 1))
    assert 1 + 0.4 * k - (2.1 + 1.1 * (PATIENCE + 1)) / 2.1 > 0  # the premise: the bound alone goes on


def test_auto_runs_end_to_end_and_never_slower_than_its_own_root_choice(write):
    from ecosim.simulate import cost_model
    trace = read_trace(write(tiny_trace(9, requests=3, positions=40)))
    r = TraceReplay(trace)
    for place in (Hbm(), parse_placement("ep:2"), parse_placement("offload:4")):
        cost = cost_model(trace, get_device("h200"), place, CostConfig())
        auto = r.run(PolicySpec("ecospec-auto", predictor="oracle"), cost)
        ar = r.run(PolicySpec("ar"), cost)
        assert auto.tokens == ar.tokens
        steps = r.steps(PolicySpec("ecospec-auto", predictor="oracle"), cost)
        assert np.array_equal(steps.speculative, steps.verified > 1)  # root-only steps do not draft
        for name in ("evict", "cascade", "eagle2-default", "sglang-default", "vllm-chain"):
            row = r.run(PolicySpec(name, 2), cost)
            assert row.tokens == ar.tokens and math.isfinite(row.time_s)
    with pytest.raises(Exception, match="value"):
        PolicySpec("ecospec-auto", value="often")
    c = r.context(cost)
    order, best = auto_order(r.trees, r.predicted("oracle"), values(c, "raw"), pricer(c), trace.positions["context_len"])
    assert (best <= r.trees.n_nodes - 1).all() and (order[r.trees.depth == 0] == -1).all()
    # growing only the trees the requests visit changes no figure of the replay
    cost = cost_model(trace, get_device("h200"), parse_placement("ep:2"), CostConfig())
    spec = PolicySpec("ecospec-auto", predictor="token")
    c = r.context(cost)
    every = auto_select(r.trees, *auto_order(r.trees, r.predicted("token"), values(c, "calibrated"), pricer(c),
                                             trace.positions["context_len"]))
    assert r.run(spec, cost).time_s == pytest.approx(r.run_selection(every, cost).time_s, rel=1e-12)
    # the token predictor's sets, held once per token, grow and scale exactly as the same sets row by row
    sets = r.predicted("token")
    assert sets.index is not None

    def grown(p):  # (order, best prefix, beta) of the growth scaled by the union scale it fits
        beta, fold, _ = union_scale(r.trees, p)
        return (*auto_order(r.trees, p, values(c, "calibrated"), pricer(c), trace.positions["context_len"],
                            scale=(beta, fold)), beta)

    assert all(np.array_equal(a, b) for a, b in zip(grown(sets), grown(sets.dense())))


def cli(capsys, *args: str) -> tuple[int, str, str]:
    from ecosim.cli import main
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_replay_auto_and_tune_end_to_end(write, capsys):
    import json
    path = str(write(tiny_trace(12, requests=3, positions=40)))
    code, out, err = cli(capsys, "replay", path, "--policy", "ecospec-auto", "--predictor", "oracle", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [(t["policy"], t["value"]) for t in doc["totals"]] == [("ecospec-auto", "calibrated")]
    assert doc["totals"][0]["tokens"] > 0
    code, out, err = cli(capsys, "replay", path, "--predictor", "oracle", "--json")
    assert code == 0, err
    assert [t["policy"] for t in json.loads(out)["totals"]] == ["ar", "confidence", "ecospec", "ecospec-auto", "evict",
                                                                  "cascade", "eagle2-default", "sglang-default",
                                                                  "vllm-chain", "oracle"]
    code, out, err = cli(capsys, "replay", path, "--value", "guess")
    assert code == 2 and "value" in err
    code, out, err = cli(capsys, "tune", path, "--placement", "ep:2", "--predictor", "oracle", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["placement"] == "ep:2" and doc["speedup_vs_ar"] >= 1.0  # ar is a candidate: never slower than it
    flags = doc["static"]["sglang_flags"]  # a synthetic trace: an EAGLE-3 head whose path the user fills in
    assert flags.startswith("--speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT_PATH --speculative-num-steps ")
    assert doc["best_ms_per_token"] <= min(doc["ar_ms_per_token"], doc["static"]["ms_per_token"])  # what SGLang runs
    assert doc["overall_ms_per_token"] <= min(doc["best_ms_per_token"], doc["auto_ms_per_token"])
    code, out, err = cli(capsys, "tune", path, "--predictor", "oracle")
    assert code == 0 and "recommendation" in out and "SGLang" in out


def test_replay_lambda_auto_runs_the_self_tuning_policy(write, capsys):
    import json
    path = str(write(tiny_trace(12, requests=3, positions=40)))
    code, out, err = cli(capsys, "replay", path, "--policy", "ecospec", "--lambda", "auto", "--predictor", "oracle", "--json")
    assert code == 0, err
    auto = json.loads(out)["totals"]
    code, out, err = cli(capsys, "replay", path, "--policy", "ecospec-auto", "--predictor", "oracle", "--json")
    assert [t["policy"] for t in auto] == ["ecospec-auto"] and auto == json.loads(out)["totals"]
    code, out, err = cli(capsys, "replay", path, "--lambda", "auto", "--predictor", "oracle", "--json")
    assert code == 0, err
    assert [t["policy"] for t in json.loads(out)["totals"]].count("ecospec-auto") == 1  # ecospec became it: once
    code, out, err = cli(capsys, "replay", path, "--lambda", "often")
    assert code == 2 and "auto" in err
