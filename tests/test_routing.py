"""Routing: importers of each format, statistics worked by hand, the generator's invariants, the fit."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TINY
from ecosim.catalog.models import get_model
from ecosim.cli import main
from ecosim.errors import EcoSimError
from ecosim.hybrid import synthesize_hybrid
from ecosim.routing.calibrate import fit, moments, simulate
from ecosim.routing.data import Routing, from_lists, read_routing
from ecosim.routing.generator import RoutingKnobs, path_hashes
from ecosim.routing.importers import import_routing
from ecosim.routing.stats import neighbour_overlap, routing_stats, window_distinct
from ecosim.synth import SynthConfig, accepted_length, synthesize

RNG = np.random.default_rng(0)
SEQS = [RNG.integers(0, 8, (n, 3, 2)) for n in (5, 7)]
for s in SEQS:  # distinct experts within each (token, layer)
    s[..., 1] = (s[..., 0] + 1 + RNG.integers(0, 7, s.shape[:2])) % 8


def _same(r: Routing, seqs: list[np.ndarray]) -> None:
    assert list(r.seq_len) == [len(s) for s in seqs]
    assert np.array_equal(r.experts, np.concatenate(seqs))
    assert r.provenance == "real"


# ------------------------------------------------------------------------------------ importers


def test_npz_folder(tmp_path: Path) -> None:
    d = tmp_path / "src"
    d.mkdir()
    e = np.concatenate(SEQS).astype(np.int8)
    np.savez(d / "routing.npz", expert_ids=e, expert_probs=np.full(e.shape, 0.5, np.float16), token=np.arange(len(e), dtype=np.int32),
             seq_start=np.array([0, 5]), seq_len=np.array([5, 7]))
    (d / "meta.json").write_text(json.dumps({"model": "m", "experts": 8, "top_k": 2, "token_strings": [str(i) for i in range(12)]}))
    r = import_routing(d)
    _same(r, SEQS)
    assert r.num_experts == 8 and list(r.token) == list(range(12)) and r.gates is not None


def test_vllm_npy_npz_and_json(tmp_path: Path) -> None:
    np.save(tmp_path / "one.npy", SEQS[0].astype(np.int16))
    _same(import_routing(tmp_path / "one.npy", num_experts=8), SEQS[:1])
    np.savez(tmp_path / "two.npz", a=SEQS[0], b=SEQS[1])
    _same(import_routing(tmp_path / "two.npz", num_experts=8), SEQS)
    (tmp_path / "r.json").write_text(json.dumps([{"routed_experts": s.tolist(), "token_ids": list(range(len(s)))} for s in SEQS]))
    r = import_routing(tmp_path / "r.json", num_experts=8)
    _same(r, SEQS)
    assert list(r.token) == [*range(5), *range(7)]


def test_sglang_per_token_json_chains_tokens_by_position_and_maps_physical_ids(tmp_path: Path) -> None:
    recs = []
    fp = 0
    for s in SEQS:  # batch 1: one decode token per forward pass, positions restart per request
        for i in range(len(s)):
            # physical id = logical id + 8 (a map that undoes it), padded to 3 slots with -1
            ids = np.concatenate([s[i] + 8, -np.ones((3, 1), int)], axis=1)  # (layers, k + 1)
            recs.append({"forward_pass_id": fp, "rank": 0, "input_ids": [100 + i], "positions": [10 + i],
                         "forward_mode": 2, "topk_ids_of_layer": ids[:, None, :].tolist()})
            fp += 1
    phys = [[(j - 8) % 8 for j in range(16)] for _ in range(3)]
    (tmp_path / "sg.json").write_text(json.dumps({"records": recs, "last_physical_to_logical_map": phys}))
    r = import_routing(tmp_path / "sg.json", num_experts=8)
    _same(r, SEQS)
    assert list(r.token[:5]) == [100, 101, 102, 103, 104]


def test_megatron_router_trace_jsonl(tmp_path: Path) -> None:
    lines = []
    s = SEQS[1]
    for step, (a, b) in enumerate(((0, 4), (4, 7))):
        for layer in range(3):
            lines.append({"step": step, "stage": "pre_dispatch", "block": "decoder", "layer": layer + 1, "rank": 0,
                          "num_tokens": b - a, "topk": 2, "top_indices": s[a:b, layer].tolist()})
        lines.append({"step": step, "stage": "pre_dispatch", "block": "decoder", "layer": 1, "rank": 0, "mtp_idx": 0,
                      "num_tokens": 1, "topk": 2, "top_indices": [[0, 1]]})
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    r = import_routing(tmp_path / "t.jsonl", num_experts=8)
    _same(r, [s])
    assert (r.token == -1).all()


def _object_npy(path: Path) -> None:
    """An .npy of dtype object (its payload would be a pickle): header only, then junk bytes."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (1,)})
        f.write(b"\x80\x04junk")


MALFORMED = [
    ("bad.npy", lambda p: np.save(p, np.zeros((3, 4))), "integer array"),
    ("bad.json", lambda p: p.write_text("[[1, 2], [3]]"), "routed_experts"),
    ("notjson.json", lambda p: p.write_text("{oops"), "not valid JSON"),
    ("sg.json", lambda p: p.write_text(json.dumps({"records": [{"input_ids": [1]}]})), "has no 'positions'"),
    ("x.jsonl", lambda p: p.write_text('{"step": 0}\n'), "lacks step/layer/top_indices"),
    ("x.pt", lambda p: p.write_bytes(b"\x80\x04"), "never unpickles"),
    ("obj.npy", lambda p: _object_npy(p), "without pickle"),
]


@pytest.mark.parametrize("name,write,expect", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, name: str, write, expect: str) -> None:
    src = tmp_path / name
    write(src)
    with pytest.raises(EcoSimError, match=expect):
        import_routing(src)
    assert main(["import-routing", str(src), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ecosim: error:") and not (tmp_path / "out").exists()


def test_import_writes_parquet_and_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    np.savez(tmp_path / "two.npz", a=SEQS[0], b=SEQS[1])
    out = tmp_path / "r"
    assert main(["import-routing", str(tmp_path / "two.npz"), "--out", str(out), "--num-experts", "8", "--credit", "test data"]) == 0
    r = read_routing(out)
    _same(r, SEQS)
    assert r.source["credit"] == "test data" and r.source["format"] == "vllm"
    before = (out / "routing.parquet").read_bytes()
    assert main(["import-routing", str(tmp_path / "two.npz"), "--out", str(out)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err and (out / "routing.parquet").read_bytes() == before


# ------------------------------------------------------------------------------ statistics by hand


def test_statistics_worked_by_hand() -> None:
    # one layer, top-2 of 4 experts; sequence A = {0,1}, {1,2}, {2,3}; sequence B = {0,1}, {0,1}
    seqs = [np.array([[[0, 1]], [[1, 2]], [[2, 3]]]), np.array([[[0, 1]], [[0, 1]]])]
    r = from_lists(seqs, 4)
    # pairs inside sequences: A: 1/2, 1/2; B: 2/2 (never across A's end and B's start)
    assert neighbour_overlap(r)[0] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    w = window_distinct(r, 4)
    assert w[0, 0] == 2.0
    assert w[1, 0] == pytest.approx((3 + 3 + 2) / 3)  # windows of 2: A {0,1,2}, {1,2,3}; B {0,1}
    assert w[2, 0] == 4.0  # only A is 3 long
    assert np.isnan(w[3, 0])
    s = routing_stats(r)
    assert s["overall"]["dead"] == 0 and s["overall"]["max_over_fair"] == pytest.approx(4 / (10 / 4))  # expert 1: 4 of 10 slots


def test_token_recall_is_one_when_routing_is_a_function_of_the_token() -> None:
    rng = np.random.default_rng(1)
    table = np.stack([rng.permutation(16)[:2] for _ in range(20)])[:, None, :]
    toks = [rng.integers(0, 20, 30) for _ in range(8)]
    r = from_lists([table[t] for t in toks], 16, tokens=toks)
    assert routing_stats(r)["overall"]["token_recall"] == 1.0


# ------------------------------------------------------------------------------ generator invariants


DEEP = replace(get_model("deepseek-v3.1"), name="deep-small", num_layers=3, moe_layers=(1, 2), num_experts=32, top_k=4)
SHAPES = [TINY, DEEP, replace(TINY, family="gpt_oss", num_experts=16, top_k=4)]


def _groups_by_path(manifest: dict, positions: dict, nodes: dict) -> tuple[np.ndarray, np.ndarray]:
    n = positions["n_nodes"].astype(np.int64)
    h = path_hashes(nodes, np.concatenate([[0], np.cumsum(n)]))
    order = np.argsort(h, kind="stable")
    same = h[order][1:] == h[order][:-1]
    return order, same


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(SHAPES), depth=st.integers(1, 4), topk=st.integers(1, 3),
       t=st.floats(0, 0.6), p=st.floats(0, 0.4), c=st.floats(0, 6), share=st.sampled_from([0.0, 0.5]))
def test_same_token_in_the_same_context_routes_identically(seed, shape, depth, topk, t, p, c, share) -> None:
    m, pos, nodes = synthesize(shape, SynthConfig(requests=2, positions=12, depth=depth, topk=topk, max_nodes=8, seed=seed,
                                                  token_affinity=t, parent_affinity=p, context=c, context_share=share,
                                                  gates=True, active_vocab=30))
    order, same = _groups_by_path(m, pos, nodes)
    assert same.any() or pos["n_nodes"][0] == 1  # the accepted child at p and the root at p + 1 exist
    for col in ("experts", "gates"):
        x = nodes[col][order]
        assert (x[1:][same] == x[:-1][same]).all()
    # the accepted child at p (token = root p+1's token) is that root, expert for expert
    n = int(pos["n_nodes"][0])
    ex = nodes["experts"].reshape(-1, n, nodes["experts"].shape[1])
    tok, par = nodes["token"].reshape(-1, n), nodes["parent"].reshape(-1, n)
    for i in range(len(ex) - 1):
        if pos["request_id"][i] == pos["request_id"][i + 1]:
            kid = np.flatnonzero((par[i] == 0) & (tok[i] == tok[i + 1, 0]))
            for k in kid:
                assert (ex[i, k] == ex[i + 1, 0]).all()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), t=st.floats(0, 0.9), c=st.floats(0, 8))
def test_deepseek_routes_within_topk_group_groups(seed, t, c) -> None:
    _, _, nodes = synthesize(DEEP, SynthConfig(requests=2, positions=8, depth=2, topk=2, max_nodes=4, seed=seed,
                                               token_affinity=t, parent_affinity=0.0, context=c))
    groups = nodes["experts"].reshape(-1, DEEP.num_moe_layers, DEEP.top_k) // (DEEP.num_experts // 8)
    used = np.array([[len(set(row)) for row in node] for node in groups])
    assert used.max() <= 4


def test_hybrid_roots_and_accepted_children_are_exactly_real() -> None:
    rng = np.random.default_rng(3)
    shape = replace(TINY, family="gpt_oss")
    seqs = [np.stack([np.stack([rng.permutation(8)[:2] for _ in range(3)]) for _ in range(n)]) for n in (20, 15)]
    toks = [rng.integers(0, 40, len(s)) for s in seqs]
    real = from_lists(seqs, 8, tokens=toks, model="tiny", provenance="real")
    m, pos, nodes = synthesize_hybrid(shape, SynthConfig(requests=2, positions=50, depth=3, topk=2, max_nodes=6, seed=1,
                                                         context=2.0, context_share=0.5), real)
    assert m["provenance"]["kind"] == "hybrid" and m["synthetic"] is True
    n = int(pos["n_nodes"][0])
    ex = nodes["experts"].reshape(-1, n, 6)
    tok, par = nodes["token"].reshape(-1, n), nodes["parent"].reshape(-1, n)
    flat = [(s, i) for s in range(2) for i in range(len(seqs[s]) - 1)]
    for row, (s, i) in enumerate(flat):
        assert tok[row, 0] == toks[s][i] and (ex[row, 0] == seqs[s][i].reshape(-1)).all()
        for k in np.flatnonzero((par[row] == 0) & (tok[row] == toks[s][i + 1])):
            assert (ex[row, k] == seqs[s][i + 1].reshape(-1)).all()
    # every accepted node, at any depth, is the real token and routing of its position
    nxt = nodes["target_next"].reshape(-1, n)
    dep = nodes["depth"].reshape(-1, n)
    deep = 0
    for row, (s, i) in enumerate(flat):
        node, d = 0, 0
        while True:
            kids = np.flatnonzero((par[row] == node) & (tok[row] == nxt[row, node]))
            if not len(kids) or i + d + 1 >= len(seqs[s]):
                break
            node, d = int(kids[0]), d + 1
            deep += d >= 2
            assert tok[row, node] == toks[s][i + d] and dep[row, node] == d
            assert (ex[row, node] == seqs[s][i + d].reshape(-1)).all()
    assert deep > 0  # the case was exercised
    order, same = _groups_by_path(m, pos, nodes)
    x = nodes["experts"][order]
    assert (x[1:][same] == x[:-1][same]).all()


def test_accept_len_sets_the_mean_accepted_length() -> None:
    cfg = SynthConfig(requests=2, positions=200, depth=5, topk=3, max_nodes=16, accept_len=2.5, seed=2)
    m, pos, nodes = synthesize(TINY, cfg)
    assert accepted_length(nodes, int(pos["n_nodes"][0])) == pytest.approx(2.5, abs=0.25)
    assert m["draft"]["accept_len"] == 2.5 and m["draft"]["bytes"] > 0


@pytest.mark.parametrize("accept", [0.0, 0.4, 1.0])
def test_an_unrouted_synthesis_is_the_routed_trace_less_its_routing(accept) -> None:
    """route=False (searches over acceptance) changes nothing but the experts: every node reads 0..k-1."""
    cfg = SynthConfig(requests=2, positions=30, depth=4, topk=3, max_nodes=10, accept=accept, seed=3)
    m, pos, nodes = synthesize(TINY, cfg)
    m0, pos0, bare = synthesize(TINY, cfg, route=False)
    assert m0 == m and pos0.keys() == pos.keys() and all((pos0[k] == pos[k]).all() for k in pos)
    assert set(bare) == set(nodes) - {"gates"}
    for k in set(bare) - {"experts"}:
        assert np.array_equal(bare[k], nodes[k], equal_nan=True), k
    assert bare["experts"].shape == nodes["experts"].shape
    assert (bare["experts"].reshape(len(bare["experts"]), TINY.num_moe_layers, TINY.top_k) == np.arange(TINY.top_k)).all()


# ------------------------------------------------------------------------------------------ the fit


def test_fit_recovers_known_knobs() -> None:
    truth = RoutingKnobs(token_affinity=0.4, parent_affinity=0.2, context=3.0, skew=0.5, context_share=0.5)
    rng = np.random.default_rng(5)
    tokens = [rng.integers(0, 60, 80) for _ in range(20)]
    real = simulate(truth, tokens, 16, 2, layers=2, seed=11)
    start = RoutingKnobs(token_affinity=0.2, parent_affinity=0.4, context=1.0, skew=1.0, context_share=0.5)
    knobs, rec = fit(real, sequences=20, layers=2, seed=0, iterations=40, start=start,
                     free=("token_affinity", "parent_affinity", "context", "skew"))
    got = moments(simulate(knobs, tokens, 16, 2, layers=2, seed=11))
    want = moments(real)
    # Tolerances (stated): affinities within 0.15, context within a third, the moments within 5% / 0.03.
    assert abs(knobs.token_affinity - truth.token_affinity) <= 0.15
    assert abs(knobs.parent_affinity - truth.parent_affinity) <= 0.15
    assert abs(knobs.context - truth.context) <= truth.context / 3
    for n in (2, 8, 32):
        assert got["window_distinct"][n] == pytest.approx(want["window_distinct"][n], rel=0.05)
    assert got["neighbour_overlap"] == pytest.approx(want["neighbour_overlap"], abs=0.03)


# ------------------------------------------------------------------------------------- end to end


def test_cli_import_inspect_calibrate_synth_and_hybrid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """import-routing -> inspect --routing --json -> synth --calibrate -> synth --preset and --routing."""
    shape = get_model("mixtral-8x7b")  # 32 layers x 8 experts, top-2: a catalogue shape with few experts
    rng = np.random.default_rng(2)
    knobs = RoutingKnobs(token_affinity=0.5, parent_affinity=0.2, context=2.0, skew=0.3)
    toks = [rng.integers(0, 50, 70) for _ in range(4)]
    r = simulate(knobs, toks, shape.num_experts, shape.top_k, layers=shape.num_moe_layers, seed=3)
    (tmp_path / "src.json").write_text(json.dumps([{"routed_experts": r.experts[a : a + n].tolist(), "token_ids": t.tolist()}
                                                   for a, n, t in zip(r.seq_start, r.seq_len, toks)]))
    routing = tmp_path / "routing"
    assert main(["import-routing", str(tmp_path / "src.json"), "--out", str(routing), "--model", "mixtral-8x7b"]) == 0
    capsys.readouterr()
    assert main(["inspect", "--routing", str(routing), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)[0]
    assert stats["provenance"] == "real" and stats["tokens"] == 280 and stats["model"] == "mixtral-8x7b"
    preset = tmp_path / "preset.json"
    assert main(["synth", str(preset), "--model", "mixtral-8x7b", "--calibrate", str(routing), "--fit-fraction", "1"]) == 0
    assert json.loads(preset.read_text())["model"] == "mixtral-8x7b"
    assert main(["synth", str(preset), "--model", "mixtral-8x7b", "--calibrate", str(routing)]) == 2  # never overwritten
    capsys.readouterr()
    out = tmp_path / "s"
    assert main(["synth", str(out), "--model", "mixtral-8x7b", "--preset", str(preset), "--requests", "1", "--positions", "8",
                 "--depth", "2", "--topk", "2", "--max-nodes", "4"]) == 0
    assert "routing knobs:" in capsys.readouterr().out
    hyb = tmp_path / "h"
    assert main(["synth", str(hyb), "--model", "mixtral-8x7b", "--routing", str(routing), "--requests", "2", "--positions", "10",
                 "--depth", "2", "--topk", "2", "--max-nodes", "4", "--accept-len", "1.5"]) == 0
    assert main(["check", str(hyb)]) == 0
    assert "(hybrid, mixtral-8x7b, 2 requests, 20 positions)" in capsys.readouterr().out
    m = json.loads((hyb / "manifest.json").read_text())
    assert m["version"] == 2 and m["provenance"]["kind"] == "hybrid" and m["draft"]["accept_len"] == 1.5


def test_routing_of_a_config_model_names_the_config_so_the_shape_is_found_again(tmp_path: Path) -> None:
    """import-routing --model CONFIG records the config's absolute path as the model, so get_model (predictor
    evaluation on a routing set) finds the same shape from anywhere; a catalogue name stays a name."""
    from ecosim.catalog.models import get_model
    cfg = {"model_type": "mixtral", "num_hidden_layers": 3, "num_local_experts": 8, "num_experts_per_tok": 2,
           "hidden_size": 64, "intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 256}
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(cfg))
    np.savez(tmp_path / "two.npz", a=SEQS[0], b=SEQS[1])
    out = tmp_path / "r"
    assert main(["import-routing", str(tmp_path / "two.npz"), "--out", str(out), "--model", str(tmp_path / "tiny")]) == 0
    r = read_routing(out)
    assert r.model == str((tmp_path / "tiny" / "config.json").resolve())
    assert get_model(r.model) == get_model(str(tmp_path / "tiny"))
