"""Routing layouts research repositories commit (atomic events, per-layer CSV), and the checks
`inspect --routing` adds: the group span of a group-limited router, same token in the same context."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecosim.catalog.models import get_model
from ecosim.cli import main
from ecosim.errors import EcoSimError
from ecosim.routing.calibrate import simulate
from ecosim.routing.check import check_preset
from ecosim.routing.data import Routing, from_lists, read_routing, trace_continuation, write_routing
from ecosim.routing.generator import RoutingKnobs
from ecosim.routing.importers import detect, import_routing
from ecosim.routing.stats import group_span, routing_stats
from ecosim.synth import SynthConfig, synthesize
from ecosim.trace.io import read_trace, write_trace

# two sequences, 3 and 2 tokens, 2 layers, top-2 of 8 experts (hand-made)
A = np.array([[[0, 1], [2, 3]], [[1, 2], [3, 4]], [[5, 6], [7, 0]]])
B = np.array([[[4, 5], [6, 7]], [[4, 5], [6, 7]]])
TOK_A, TOK_B = [10, 11, 12], [20, 21]


def _events(seq_id: int, experts: np.ndarray, tokens: list[int], shuffle: int = 0) -> dict[str, np.ndarray]:
    """Atomic events of one sequence: one row per (token, layer), in a seeded shuffled order."""
    T, L, k = experts.shape
    pos, layer = np.repeat(np.arange(T), L), np.tile(np.arange(L), T)
    order = np.random.default_rng(shuffle).permutation(T * L) if shuffle else np.arange(T * L)
    return {"sequence_id": np.full(T * L, seq_id, np.int32)[order], "generated_token_index": pos[order].astype(np.int32),
            "layer_index": layer[order].astype(np.int16), "requested_expert_ids": experts.reshape(-1, k)[order].astype(np.int16),
            "router_weights": np.full((T * L, k), 0.25, np.float32)[order], "token_id": np.repeat(tokens, L)[order].astype(np.int32),
            "schema_version": np.array("test_events_v1")}


def test_events_folder_of_chunks_in_any_row_order(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    np.savez(tmp_path / "a" / "s0.npz", **_events(7, A, TOK_A, shuffle=3))
    np.savez(tmp_path / "a" / "s1.npz", **_events(9, B, TOK_B))
    (tmp_path / "a" / "s0.metadata.json").write_text(json.dumps({"num_experts": 16}))
    assert detect(tmp_path) == "events" and detect(tmp_path / "a" / "s1.npz") == "events"
    r = import_routing(tmp_path)
    assert list(r.seq_len) == [3, 2] and np.array_equal(r.experts, np.concatenate([A, B]))
    assert list(r.token) == TOK_A + TOK_B and r.gates is not None and r.gates.shape == r.experts.shape
    assert r.num_experts == 16 and not r.source["num_experts_inferred"]  # from the sidecar, not the largest id
    assert [s["sequence_id"] for s in r.sequences] == [7, 9] and r.sequences[0]["file"] == "a/s0.npz"


def test_events_file_with_two_sequences_and_a_gap_refused(tmp_path: Path) -> None:
    both = {k: np.concatenate([v1, v2]) if v1.ndim else v1 for (k, v1), v2 in
            zip(_events(0, A, TOK_A).items(), _events(1, B, TOK_B).values())}
    np.savez(tmp_path / "both.npz", **both)
    r = import_routing(tmp_path / "both.npz", num_experts=8)
    assert list(r.seq_len) == [3, 2] and np.array_equal(r.experts, np.concatenate([A, B]))
    gap = _events(0, A, TOK_A)
    keep = gap["generated_token_index"] != 1  # token 1 lost on every layer
    np.savez(tmp_path / "gap.npz", **{k: v[keep] if v.ndim else v for k, v in gap.items()})
    with pytest.raises(EcoSimError, match="not consecutive"):
        import_routing(tmp_path / "gap.npz")
    lost = _events(0, A, TOK_A)
    keep = np.arange(len(lost["layer_index"])) != 2  # one (token, layer) event lost
    np.savez(tmp_path / "lost.npz", **{k: v[keep] if v.ndim else v for k, v in lost.items()})
    with pytest.raises(EcoSimError, match="whole tokens|not consecutive"):
        import_routing(tmp_path / "lost.npz")


def _csv(experts: np.ndarray, words: list[str], first_layer: int = 1) -> str:
    lines = ["Layer ID,Batch Number,Token,Activated Expert IDs"]
    for layer in range(experts.shape[1]):
        for t, w in enumerate(words):
            lines.append(f'{layer + first_layer},0,{json.dumps(w) if "," in w else w},"{experts[t, layer].tolist()}"')
    return "\n".join(lines) + "\n"


def test_layer_csv_folder_tokens_become_a_string_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "p_1.csv").write_text(_csv(A, ["I", "Ġthink", ","]))
    (tmp_path / "p_2.csv").write_text(_csv(B, ["Ġthink", "I"]))
    assert detect(tmp_path) == "layer-csv"
    r = import_routing(tmp_path, num_experts=8)
    assert np.array_equal(r.experts, np.concatenate([A, B])) and list(r.seq_len) == [3, 2]
    assert r.token_strings == ["I", "Ġthink", ","] and list(r.token) == [0, 1, 2, 1, 0]
    assert r.source["layer_ids"] == [1, 2]  # the source's layer numbers, kept for the record
    out = tmp_path.parent / "out"
    assert main(["import-routing", str(tmp_path), "--out", str(out), "--num-experts", "8", "--credit", "hand-made"]) == 0
    assert read_routing(out).token_strings == r.token_strings
    (tmp_path / "p_3.csv").write_text("Layer ID,Batch Number,Token,Activated Expert IDs\n1,0,x,\"[0, 1, 2]\"\n")
    assert main(["import-routing", str(tmp_path), "--out", str(tmp_path.parent / "out2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "p_3.csv" in err[0] and not (tmp_path.parent / "out2").exists()


def test_layer_csv_header_checked(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("layer,token,experts\n1,a,[1]\n")
    with pytest.raises(EcoSimError, match="header"):
        import_routing(tmp_path / "x.csv")


# ------------------------------------------------------------------------------ checks by hand


def test_group_span_worked_by_hand() -> None:
    # 16 experts in 4 groups of 4; top-2: {0,1} one group, {0,5} two, {3,15} two, {12,13} one
    r = from_lists([np.array([[[0, 1]], [[0, 5]], [[3, 15]], [[12, 13]]])], 16)
    g = group_span(r, 4, 1)
    assert g["max"] == 2 and g["mean"] == pytest.approx(1.5) and g["within_limit"] == pytest.approx(0.5)
    assert group_span(r, 4, 2)["within_limit"] == 1.0


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 1000))
def test_a_deepseek_trace_passes_both_checks(tmp_path_factory: pytest.TempPathFactory, seed: int) -> None:
    shape = get_model("deepseek-v3.1")
    m, pos, nodes = synthesize(shape, SynthConfig(requests=2, positions=6, depth=2, topk=2, max_nodes=4, seed=seed))
    trace = read_trace(write_trace(tmp_path_factory.mktemp("t") / "t", m, pos, nodes))
    s = routing_stats(trace_continuation(trace), trace, groups=shape.group_limits)
    assert s["same_context"]["pairs"] > 0 and s["same_context"]["identical"] == 1.0
    assert s["group_span"]["max"] <= 4 and s["group_span"]["within_limit"] == 1.0


def test_inspect_shows_the_checks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["synth", str(tmp_path / "ds"), "--model", "deepseek-v3.1", "--requests", "2", "--positions", "8"]) == 0
    capsys.readouterr()
    assert main(["inspect", "--routing", str(tmp_path / "ds"), "--json"]) == 0
    (s,) = json.loads(capsys.readouterr().out)
    assert s["same_context"]["identical"] == 1.0 and s["group_span"]["n_group"] == 8 and s["group_span"]["within_limit"] == 1.0


def test_steps_json_reads_decode_steps_and_drops_the_prefill(tmp_path: Path) -> None:
    # layers "0" and "2" dense (null), "1" and "3" MoE, top-1; a 3-token prefill then A's 3 decode tokens
    def step(e: np.ndarray) -> dict[str, object]:
        return {"0": None, "1": e[:, 0].tolist(), "2": None, "3": e[:, 1].tolist()}

    steps = [step(np.array([[[5], [6]], [[7], [0]], [[1], [1]]]))] + [step(A[t : t + 1, :, :1]) for t in range(3)]
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "0.json").write_text(json.dumps(steps))
    assert detect(tmp_path) == "steps-json" and detect(tmp_path / "q" / "0.json") == "steps-json"
    r = import_routing(tmp_path, num_experts=8)
    assert np.array_equal(r.experts, A[:, :, :1]) and r.source["layer_ids"] == [1, 3]
    assert "3 prefill tokens dropped" in r.source["note"] and (r.token == -1).all()
    (tmp_path / "q" / "1.json").write_text(json.dumps(steps[:2] + steps[:1]))  # prefill again after decode began
    with pytest.raises(EcoSimError, match="after decode began"):
        import_routing(tmp_path, num_experts=8)


# ------------------------------------------------------------------------------ preset checks


def _generated_real(knobs: RoutingKnobs, seed: int) -> Routing:
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(0, 60, 80) for _ in range(24)]
    r = simulate(knobs, tokens, 16, 2, layers=2, seed=seed + 100)
    r.provenance = "real"  # stands in for a recording: the check only reads experts and tokens
    return r


def test_a_preset_meets_the_targets_on_routing_made_with_its_own_knobs() -> None:
    knobs = RoutingKnobs(token_affinity=0.5, parent_affinity=0.2, context=5.0, skew=0.4, context_share=0.5)
    c = check_preset(_generated_real(knobs, 1), knobs, layers=2, seed=2)
    assert c["meets"] == {"window": True, "overlap": True, "recall": True}
    assert 2 <= c["window_worst"]["n"] <= 64 and c["sequences"] == 24 and c["tokens"] == 24 * 80
    far = RoutingKnobs(token_affinity=0.0, parent_affinity=0.0, context=0.0, skew=0.0, context_share=0.0)
    bad = check_preset(_generated_real(knobs, 1), far, layers=2, seed=2)
    assert not bad["meets"]["window"] and bad["window_worst"]["rel_error"] > 0.1


def test_check_preset_needs_tokens() -> None:
    r = from_lists([A, A, A], 8)
    with pytest.raises(EcoSimError, match="tokens"):
        check_preset(r, RoutingKnobs())


def test_inspect_check_preset_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    knobs = RoutingKnobs(token_affinity=0.5, parent_affinity=0.2, context=5.0, skew=0.4, context_share=0.5)
    write_routing(tmp_path / "r", _generated_real(knobs, 3))
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"model": "x", "source": "hand-made", "knobs": {k: getattr(knobs, k) for k in
                                  ("token_affinity", "parent_affinity", "context", "skew", "context_share")}}))
    assert main(["inspect", "--routing", str(tmp_path / "r"), "--check-preset", str(preset), "--json", "--seed", "1"]) == 0
    (c,) = json.loads(capsys.readouterr().out)
    assert c["preset_source"] == "hand-made" and c["sequences"] == 12 and c["meets"]["overlap"]


def test_inspect_takes_the_group_limits_from_the_routing_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # 256 experts in 8 groups of 32: token 0 spans groups {0, 1}, token 1 spans 5 groups (beyond DeepSeek's 4)
    e = np.array([[[0, 1, 2, 3, 32, 33, 34, 35]], [[0, 32, 64, 96, 128, 1, 2, 3]]])
    write_routing(tmp_path / "r", from_lists([e, e], 256, model="deepseek-v3.1"))
    write_routing(tmp_path / "u", from_lists([e, e], 256))  # unknown model: no limits to check
    assert main(["inspect", "--routing", str(tmp_path / "r"), str(tmp_path / "u"), "--json"]) == 0
    r, u = json.loads(capsys.readouterr().out)
    assert r["group_span"] == {"n_group": 8, "topk_group": 4, "mean": 3.5, "max": 5, "within_limit": 0.5}
    assert "group_span" not in u


def test_inspect_reads_a_raw_layout_folder_directly(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "p_1.csv").write_text(_csv(A, ["a", "b", "c"]))
    (tmp_path / "p_2.csv").write_text(_csv(B, ["b", "a"]))
    assert main(["inspect", "--routing", str(tmp_path), "--json"]) == 0
    (s,) = json.loads(capsys.readouterr().out)
    assert s["tokens"] == 5 and s["source"]["format"] == "layer-csv"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["inspect", "--routing", str(empty)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
