"""Routing presets: the scaling by shape (hand-worked, identity, inverse), what every shipped preset
records, the generator's invariants under every shipped preset, and the scaled fit end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecosim.catalog.models import MODELS, get_model
from ecosim.cli import main
from ecosim.routing.calibrate import moments, simulate
from ecosim.routing.generator import RoutingKnobs, path_hashes
from ecosim.routing.presets import load_preset, preset_hash, preset_knobs, shipped
from ecosim.routing.scale import RoutingShape, distinct_of, effective_tokens, scale_distinct, scale_moments
from ecosim.synth import calibrated, synthesize

BASE = RoutingShape(32, 4)  # gpt-oss-20b


# ------------------------------------------------------------------------------------ the scaling


def test_scaling_worked_by_hand() -> None:
    """gpt-oss-20b's 6.277 distinct experts in 2 tokens: n_eff = ln(1 - 6.277/32) / ln(7/8) = 1.635;
    on 128 experts, top-4: 128 (1 - (31/32)^1.635) = 6.476, so neighbour overlap 2 - 6.476/4 = 0.381."""
    assert effective_tokens(6.277, 32, 4) == pytest.approx(1.635, abs=1e-3)
    assert scale_distinct(6.277, BASE, RoutingShape(128, 4)) == pytest.approx(6.476, abs=1e-3)
    m = {"neighbour_overlap": 0.4308, "window_distinct": {2: 6.277, 64: 21.661}, "window_curve": [6.277, 21.661],
         "token_recall": 0.51, "max_over_fair_median": 2.5}
    s = scale_moments(m, BASE, RoutingShape(128, 4))
    assert s["neighbour_overlap"] == pytest.approx(0.381, abs=1e-3)
    assert s["token_recall"] == 0.51 and s["max_over_fair_median"] == 2.5  # kept as they are
    assert effective_tokens(4, 32, 4) == pytest.approx(1.0)  # one token touches k experts


def test_scaling_is_the_identity_for_the_gpt_oss_20b_shape() -> None:
    m = moments(simulate(RoutingKnobs(0.4, 0.2, 3.0, 0.5, 0.5), [np.arange(80) % 13, np.arange(70) % 7], 32, 4, layers=2))
    assert scale_moments(m, BASE, RoutingShape.of(get_model("gpt-oss-20b"))) == m
    assert scale_moments(m, RoutingShape(64, 8), RoutingShape(64, 8)) == m


@settings(max_examples=60, deadline=None)
@given(e=st.sampled_from([8, 32, 64, 128, 256]), k=st.sampled_from([1, 2, 4, 8]), frac=st.floats(0.0, 0.999))
def test_effective_tokens_inverts_and_scaled_curves_stay_within_the_experts(e: int, k: int, frac: float) -> None:
    d = k + frac * (e - k)
    assert distinct_of(effective_tokens(d, e, k), e, k) == pytest.approx(d, rel=1e-6)
    for to in (RoutingShape(8, 2), RoutingShape(128, 8), RoutingShape(256, 8)):
        x = scale_distinct(d, RoutingShape(e, k), to)
        assert to.top_k - 1e-9 <= x <= to.num_experts
        assert scale_distinct(d + 0.5 * (e - d), RoutingShape(e, k), to) >= x  # monotone


# ---------------------------------------------------------------------------------- shipped presets


def test_every_catalogue_shape_has_a_preset_that_says_what_it_was_fitted_to() -> None:
    assert set(shipped()) == set(MODELS)
    own = load_preset("gpt-oss-20b")
    assert own["source"].startswith("fitted to real routing of gpt-oss-20b") and "scaled" not in own["fit"]
    for name in MODELS:
        p = load_preset(name)
        assert p["model"] == name
        k = preset_knobs(name)
        assert (k.n_group, k.topk_group) == ((8, 4) if name.startswith("deepseek") else (0, 0))
        assert len(preset_hash(name)) == 10
        if name == "gpt-oss-20b":
            continue
        sc = p["fit"]["scaled"]
        assert p["source"].startswith(f"not fitted to {name}'s routing") and "scaled" in p["source"]
        assert sc["from"]["model"] == "gpt-oss-20b" and "effective tokens" in sc["rule"]
        # the recorded target is the recorded real target scaled by the rule
        to = RoutingShape.of(get_model(name))
        for n, v in sc["real_target"]["window_distinct"].items():
            assert p["fit"]["target"]["window_distinct"][n] == pytest.approx(scale_distinct(v, BASE, to), abs=2e-3)


def test_calibrated_config_carries_the_preset() -> None:
    cfg = calibrated("gpt-oss-120b", requests=3)
    k = preset_knobs("gpt-oss-120b")
    assert (cfg.token_affinity, cfg.context_share, cfg.requests) == (k.token_affinity, k.context_share, 3)
    assert cfg.preset.startswith("preset gpt-oss-120b: not fitted to")
    m, _, _ = synthesize(get_model("gpt-oss-120b"), calibrated("gpt-oss-120b", requests=1, positions=4, depth=2, topk=2, max_nodes=3))
    assert "not fitted to gpt-oss-120b" in m["provenance"]["source"]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(sorted(MODELS)), depth=st.integers(1, 3), topk=st.integers(1, 3))
def test_invariants_hold_under_every_shipped_preset(seed: int, name: str, depth: int, topk: int) -> None:
    shape = get_model(name)
    _, pos, nodes = synthesize(shape, calibrated(shape, requests=2, positions=10, depth=depth, topk=topk, max_nodes=6,
                                                 seed=seed, active_vocab=30, gates=True))
    h = path_hashes(nodes, np.concatenate([[0], np.cumsum(pos["n_nodes"].astype(np.int64))]))
    order = np.argsort(h, kind="stable")
    same = h[order][1:] == h[order][:-1]
    assert same.any()  # the accepted child at p and the root at p + 1
    for col in ("experts", "gates"):
        x = nodes[col][order]
        assert (x[1:][same] == x[:-1][same]).all()
    ex = nodes["experts"].reshape(-1, shape.num_moe_layers, shape.top_k)
    assert all(len(set(row)) == shape.top_k for row in ex.reshape(-1, shape.top_k)[:200])
    if shape.family == "deepseek_v3":
        groups = ex // (shape.num_experts // 8)
        assert max(len(set(row)) for row in groups.reshape(-1, shape.top_k)) <= 4


# --------------------------------------------------------------------------------------- end to end


def test_calibrating_another_shape_fits_the_scaled_moments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Routing of one shape (16 experts, top-2) calibrates a preset for another (gpt-oss-20b's 32 x top-4)."""
    rng = np.random.default_rng(4)
    toks = [rng.integers(0, 40, 70) for _ in range(4)]
    r = simulate(RoutingKnobs(0.5, 0.2, 2.0, 0.3), toks, 16, 2, layers=24, seed=2)
    (tmp_path / "src.json").write_text(json.dumps([{"routed_experts": r.experts[a : a + n].tolist(), "token_ids": t.tolist()}
                                                   for a, n, t in zip(r.seq_start, r.seq_len, toks)]))
    routing = tmp_path / "routing"
    assert main(["import-routing", str(tmp_path / "src.json"), "--out", str(routing), "--num-experts", "16"]) == 0
    out = tmp_path / "p.json"
    assert main(["synth", str(out), "--model", "gpt-oss-20b", "--calibrate", str(routing), "--fit-fraction", "1"]) == 0
    p = json.loads(out.read_text())
    assert p["model"] == "gpt-oss-20b" and p["source"].startswith("not fitted to gpt-oss-20b's routing")
    sc = p["fit"]["scaled"]
    assert sc["from"]["num_experts"] == 16 and sc["to"] == "32 experts, top-4"
    for n, v in sc["real_target"]["window_distinct"].items():
        assert p["fit"]["target"]["window_distinct"][n] == pytest.approx(scale_distinct(v, RoutingShape(16, 2), BASE), abs=2e-3)
