"""Sweeps: the same rows as `ecosim replay --json`, resumable after a kill, local == Ray, the winner
is the argmin of its objective, the Pareto front, and bad input as one line with exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import ROOT, tiny_trace
from ecosim.sweep.runner import KILL_AFTER_PART
from ecosim.cli import main
from ecosim.errors import EcoSimError
from ecosim.sweep import grid as g
from ecosim.sweep.results import row_of
from ecosim.sweep.winner import check_winner
from ecosim.trace.io import write_trace

# A small grid: ar, confidence (2 budgets), ecospec (2 budgets x 3 lambdas), oracle, over 2 x 3 pricings.
GRID = ["--policy", "ar,confidence,ecospec", "--budget", "2,4", "--lambda", "0:1:0.5", "--predictor", "oracle",
        "--bw", "2TB/s,4.8TB/s", "--placement", "hbm,ep:2,offload:4"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("sweep_traces")
    return [write_trace(d / "a", *tiny_trace(21)), write_trace(d / "b", *tiny_trace(22, requests=3))]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def sweep(capsys, traces, out: Path, *extra: str) -> dict:
    code, stdout, err = cli(capsys, "sweep", *map(str, traces), "--out", str(out), "--jobs", "1", "--json", *GRID, *extra)
    assert code == 0, err
    return json.loads(stdout)


@pytest.fixture(scope="module")
def swept(traces, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "run"
    code = main(["sweep", *map(str, traces), "--out", str(out), "--jobs", "1", *GRID])
    assert code == 0
    return out


# ------------------------------------------------------------------------------------------- grid


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


# ------------------------------------------------------------------------------- rows and resume


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


def _parts(d: Path) -> list[Path]:
    return [p for p in (d / "parts").glob("*.parquet") if not p.name.startswith(".")]  # not temporaries


def _frame(d: Path) -> pl.DataFrame:
    return pl.read_parquet(d / "results.parquet")


@pytest.mark.slow
def test_killed_sweep_resumes_without_loss_or_duplicates(swept, traces, tmp_path):
    out = tmp_path / "killed"
    args = [sys.executable, "-m", "ecosim.cli", "sweep", *map(str, traces), "--out", str(out), "--jobs", "1", *GRID]
    # killed right after its third part (the runner's test hook): a point that does not depend on speed
    env = dict(os.environ, **{KILL_AFTER_PART: "3"})
    proc = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert len(_parts(out)) == 3 and not (out / "results.parquet").exists()
    before = len(_parts(out))
    r = subprocess.run([*args, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["skipped"] > 0 and summary["computed"] > 0
    # computed and skipped count (configuration, trace) rows; configurations count settings
    assert summary["skipped"] + summary["computed"] == summary["configurations"] * summary["traces"] == summary["rows"]
    assert len(_parts(out)) == before + summary["tasks_run"]
    assert not list((out / "parts").glob(".tmp-*"))  # a temporary the kill left is cleaned up
    got = _frame(out)
    assert got["config_id"].n_unique() == got.height
    assert got.equals(_frame(swept))  # identical to the uninterrupted sweep, row for row


def test_rerun_skips_everything_and_rewrites_identical_results(swept, traces, capsys):
    before = (swept / "results.parquet").read_bytes()
    s = sweep(capsys, traces, swept)
    assert s["computed"] == 0 and s["skipped"] == s["configurations"] * s["traces"] == 120 and s["tasks_run"] == 0
    assert (swept / "results.parquet").read_bytes() == before


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


# ------------------------------------------------------------------------------------ the winner


def _totals(df: pl.DataFrame) -> pl.DataFrame:
    """Independent of winner.py: totals per (pricing, configuration) with polars."""
    pricing, knobs = ["hardware", "hbm_bw", "placement"], ["policy", "budget", "lambda", "predictor", "score"]
    t = df.group_by(pricing + knobs, maintain_order=True).agg(pl.col("time_s").sum(), pl.col("tokens").sum(),
                                                              pl.col("steps").sum())
    ar = t.filter(pl.col("policy") == "ar").select(*pricing, (pl.col("time_s") / pl.col("tokens")).alias("ar_tpt"))
    return t.join(ar, on=pricing, maintain_order="left").with_columns(
        tpt=pl.col("time_s") / pl.col("tokens"), tps=pl.col("tokens") / pl.col("steps")
    ).with_columns(speedup=pl.col("ar_tpt") / pl.col("tpt"))


@pytest.mark.parametrize("objective, constraint", [("time_per_token", None), ("speedup_vs_ar", None),
                                                   ("time_per_token", 1.6)])
def test_winner_is_the_argmin_of_the_objective(swept, capsys, objective, constraint):
    args = ["winner", str(swept), "--objective", objective, "--json"]
    if constraint:
        args += ["--min-tokens-per-step", str(constraint)]
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    doc = check_winner(json.loads((swept / "winner.json").read_text()))
    assert doc == json.loads(out)
    assert doc["objective"] == objective and doc["constraints"]["min_tokens_per_step"] == constraint
    assert [t["name"] for t in doc["traces"]] == ["a", "b"] and all(len(t["fingerprint"]) == 32 for t in doc["traces"])
    assert set(doc["versions"]) == {"ecosim", "numpy", "python"}
    assert len(doc["winners"]) == 6
    t = _totals(_frame(swept)).filter(pl.col("policy") != "oracle")
    if constraint:
        t = t.filter(pl.col("tps") >= constraint)
    for w in doc["winners"]:
        cands = t.filter(pl.col("hbm_bw") == w["hbm_bw"], pl.col("placement") == w["placement"])
        assert w["candidates"] == cands.height
        if cands.height == 0:
            assert w["config"] is None
            continue
        col = "tpt" if objective == "time_per_token" else "speedup"
        best = cands[col].min() if objective == "time_per_token" else cands[col].max()
        assert w["predicted"]["time_per_token_s" if col == "tpt" else "speedup_vs_ar"] == pytest.approx(best, rel=1e-12)
        mine = cands.filter(*[pl.col(k).eq_missing(w["config"][k]) for k in ("policy", "budget", "lambda", "predictor", "score")])
        assert mine.height == 1 and mine[col][0] == pytest.approx(best, rel=1e-12)
        if constraint:
            assert w["predicted"]["tokens_per_step"] >= constraint
        assert {p["fingerprint"] for p in w["per_trace"]} == {t["fingerprint"] for t in doc["traces"]}
    cli(capsys, "winner", str(swept))  # leave the default winner.json behind for the other tests


def test_pareto_front_is_non_dominated_and_complete(swept, capsys):
    code, out, err = cli(capsys, "pareto", str(swept), "--json")
    assert code == 0, err
    front = json.loads(out)["front"]
    assert front and all(r["policy"] != "oracle" for r in front)
    df = _frame(swept).filter(pl.col("policy") != "oracle")
    pts = df.group_by(["hbm_bw", "placement", "policy", "budget", "lambda"], maintain_order=True).agg(
        (pl.col("time_s").sum() / pl.col("tokens").sum()).alias("tpt"),
        (pl.col("expert_loads").sum() / pl.col("steps").sum()).alias("eps"))
    for (bw, pl_), grp in pts.group_by(["hbm_bw", "placement"], maintain_order=True):
        mine = [(r["time_per_token_s"], r["experts_per_step"]) for r in front if r["hbm_bw"] == bw and r["placement"] == pl_]
        allp = list(zip(grp["tpt"].to_list(), grp["eps"].to_list()))
        want = {p for p in allp if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in allp)}
        assert set(mine) == want and len(mine) == len(want)
    code, out, err = cli(capsys, "pareto", str(swept))
    assert code == 0 and "Pareto front" in out


# ------------------------------------------------------------------------------------ bad input


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


def test_winner_and_pareto_refuse_results_of_another_sweep(swept, tmp_path, capsys):
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(swept, d)
    meta = json.loads((d / "sweep.json").read_text())
    meta["configurations"] += 1  # as if a bigger sweep had started here and not finished
    (d / "sweep.json").write_text(json.dumps(meta))
    for cmd in ("pareto", "winner"):
        code, _, err = cli(capsys, cmd, str(d))
        assert code == 2 and len(err.strip().splitlines()) == 1 and "unfinished sweep" in err


def test_ray_missing_says_how_to_install(traces, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code, _, err = cli(capsys, "sweep", *map(str, traces), "--out", str(tmp_path / "x"), "--executor", "ray")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pip install" in err and "ray" in err
    assert not (tmp_path / "x").exists()


def test_raw_rows_rebuild_metrics_rows(swept):
    """results.parquet's derived columns are metrics.Row's, recomputed from its raw fields."""
    for rec in _frame(swept).head(20).iter_rows(named=True):
        d = row_of(rec).to_dict()
        assert all(rec[k] == d[k] for k in d if k not in ("speedup_vs_ar", "oracle_fraction"))


def test_errors_are_ecosim_errors():
    with pytest.raises(EcoSimError):
        g.parse_range("1:2:3:4", "lambda")
    assert np.isclose(g.parse_axis("lambda", "0.1:0.3:0.1")[-1], 0.3)


# ------------------------------------- the fast paths the sweep relies on equal their references
# (bitsets.pack / pack_groups, select_confidence and select_ecospec were rewritten for speed; these
# are the straightforward versions they replaced, kept here as the definition they must match.)


def _pack_reference(experts: np.ndarray, num_experts: int) -> np.ndarray:
    rows, layers, k = experts.shape
    out = np.zeros((rows, layers, (num_experts + 63) // 64), dtype=np.uint64)
    for s in range(k):
        ids = experts[:, :, s].astype(np.int64)
        valid = ids >= 0
        word = np.where(valid, ids >> 6, 0)
        bit = np.where(valid, np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64)), np.uint64(0))
        out[np.arange(rows)[:, None], np.arange(layers)[None, :], word] |= bit
    return out


def _confidence_reference(trees, budget: int) -> np.ndarray:
    order = np.lexsort((trees.node, -trees.cum_logprob, trees.depth == 0, trees.tree_of_row))
    tree_sorted = trees.tree_of_row[order]
    first = np.searchsorted(tree_sorted, np.arange(trees.n_trees))
    rank = np.empty(trees.n_rows, dtype=np.int64)
    rank[order] = np.arange(trees.n_rows) - first[tree_sorted]
    return (trees.depth == 0) | (rank < budget)


def _ecospec_reference(trees, budget, lam, predicted, num_experts, top_k, score="difference") -> np.ndarray:
    from ecosim import bitsets

    selected = trees.depth == 0
    if budget == 0:
        return selected
    layers = predicted.shape[1]
    norm = float(layers * top_k)
    n_max = int(trees.n_nodes.max(initial=1))
    parent_local = trees.trace.nodes["parent"].astype(np.int64)
    t = np.arange(trees.n_trees)
    n = trees.n_nodes[t]
    valid = np.arange(n_max)[None, :] < n[:, None]
    rows = np.where(valid, trees.start[t][:, None] + np.arange(n_max)[None, :], 0)
    value = np.where(valid, np.exp(trees.cum_logprob)[rows], -np.inf)
    cum = np.where(valid, trees.cum_logprob[rows], -np.inf)
    parent = np.where(valid, parent_local[rows], -2)
    bits = _pack_reference(predicted[rows.ravel()], num_experts).reshape(len(t), n_max, layers, -1)
    buffer = bits[:, 0].copy()
    chosen = np.zeros(valid.shape, dtype=bool)
    chosen[:, 0] = True
    frontier = valid & (parent == 0)
    active = np.ones(len(t), dtype=bool)
    for _ in range(budget):
        live = frontier & active[:, None]
        if not live.any():
            break
        new = bitsets.count(bits & ~buffer[:, None]).sum(axis=-1) / norm
        s = value - lam * new if score == "difference" else value / (1.0 + lam * new)
        s = np.where(live, s, -np.inf)
        best = s.max(axis=1)
        tie = live & (s == best[:, None])
        c = np.where(tie, cum, -np.inf)
        tie &= c == c.max(axis=1)[:, None]
        pick = np.argmax(tie, axis=1)
        go = live.any(axis=1) & (best >= 0 if score == "difference" else True)
        active &= go
        g = t[go]
        chosen[g, pick[go]] = True
        frontier[g, pick[go]] = False
        buffer[g] |= bits[g, pick[go]]
        frontier[g] |= (parent[g] == pick[go][:, None]) & valid[g]
    selected[rows[chosen]] = True
    return selected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_selection_and_packing_equal_their_references(write, seed):
    from ecosim.bitsets import pack, pack_groups
    from ecosim.policies import ecospec_offsets, select_confidence, select_ecospec
    from ecosim.trace.io import read_trace
    from ecosim.tree import Trees

    trace = read_trace(write(tiny_trace(seed, requests=3, positions=50, max_nodes=16, depth=5)))
    trees = Trees(trace)
    m = trace.model
    rng = np.random.default_rng(seed)
    # predictions with pads and repeated ids within a layer (a predictor may give either)
    noisy = rng.integers(-1, m.num_experts, size=(trees.n_rows, m.num_moe_layers, 5)).astype(np.int16)
    for predicted in (trace.experts_3d(), noisy):
        assert np.array_equal(pack(predicted, m.num_experts), _pack_reference(predicted, m.num_experts))
        groups = np.sort(rng.integers(0, 7, len(predicted)))
        want = np.zeros((8, *pack(predicted[:1], m.num_experts).shape[1:]), dtype=np.uint64)
        np.bitwise_or.at(want, groups, _pack_reference(predicted, m.num_experts))
        assert np.array_equal(pack_groups(predicted, groups, 8, m.num_experts), want)
        offsets = ecospec_offsets(predicted, m.num_experts)
        for budget, lam, score in [(0, 0.5, "difference"), (1, 0.5, "difference"), (4, 0.0, "difference"),
                                   (6, 0.3, "difference"), (12, 2.0, "difference"), (5, 1.0, "ratio"), (16, 0.1, "ratio")]:
            want = _ecospec_reference(trees, budget, lam, predicted, m.num_experts, m.top_k, score)
            got = select_ecospec(trees, budget, lam, predicted, m.num_experts, m.top_k, score)
            assert np.array_equal(got, want), (budget, lam, score)
            assert np.array_equal(select_ecospec(trees, budget, lam, predicted, m.num_experts, m.top_k, score, offsets=offsets), want)
    for budget in (0, 1, 3, 8, 100):
        assert np.array_equal(select_confidence(trees, budget), _confidence_reference(trees, budget))


@pytest.mark.parametrize("placement", ["hbm", "ep:3", "offload:4"])
def test_oracle_chain_unions_equal_the_padded_reference(write, placement):
    """The oracle prices only the cuts a <= A(p) (chain_unions); the reference packs every cut."""
    from ecosim import bitsets
    from ecosim.catalog.devices import get_device
    from ecosim.cost import CostConfig
    from ecosim.oracle import shortest_path
    from ecosim.placements import parse_placement
    from ecosim.replay import TraceReplay
    from ecosim.simulate import ORACLE, cost_model
    from ecosim.trace.io import read_trace

    r = TraceReplay(read_trace(write(tiny_trace(5, requests=3, positions=60, depth=5))))
    cost = cost_model(r.trace, get_device("h200"), parse_placement(placement), CostConfig())
    t, m = r.trees, r.trace.model
    cuts = t.chain.shape[1]
    rows = np.where(t.chain >= 0, t.chain, 0)
    bits = _pack_reference(r.trace.experts_3d()[rows.ravel()], m.num_experts)
    bits = np.bitwise_or.accumulate(bits.reshape(t.n_trees, cuts, *bits.shape[1:]), axis=1)
    flat = bits.reshape(t.n_trees * cuts, *bits.shape[2:])
    a = np.tile(np.arange(cuts), t.n_trees)
    ctx = np.repeat(r.trace.positions["context_len"].astype(np.int64), cuts)
    costs = cost.step_times(r._union(flat, cost), a + 1, ctx, speculative=False)
    costs = (costs + np.where(a > 0, cost.draft_time(speculative=True), 0.0)).reshape(t.n_trees, cuts)
    want_time, want_pos = 0.0, []
    for _, sl in t.request_slices():
        total_s, path = shortest_path(costs[sl], t.accept_len[sl])
        want_time += total_s
        want_pos.append(sl.start + np.concatenate([[0], np.cumsum(path + 1)[:-1]]))
    steps = r.oracle_steps(cost)
    assert np.array_equal(steps.tree, np.concatenate(want_pos))  # the same shortest path, step for step
    got_time = r.price(steps, cost, cache=False)[0]
    assert got_time.sum() == pytest.approx(want_time, rel=1e-12)
    row = r.run(ORACLE, cost)
    assert row.tokens == r.trace.n_trees and row.expert_loads == int(bitsets.count(steps.bits).sum())
