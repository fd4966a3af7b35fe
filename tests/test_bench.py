"""`bench/run --quick` runs every benchmark end to end and reports every figure, each finite.

No timing target is asserted: the machine may be busy. The checks that are not timings (the
engines agree, Ray and the local executor write identical rows, pieces replay the whole) are.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

from conftest import ROOT

SHAPES = ("deepseek-v3.1", "qwen3-235b-a22b", "gpt-oss-120b")
REAL = ("coding", "dialogue", "qa", "reasoning")
POLICIES = ("ar", "confidence", "ecospec", "ecospec_lam0.1", "oracle")


def expected() -> set[str]:
    names = set()
    for s in SHAPES:
        names |= {f"replay.{s}.{f}" for f in ("positions", "read_s", "numpy_pass_pos_per_s")}
        names |= {f"replay.{s}.{p}.{f}" for p in POLICIES for f in ("warm_pos_per_s", "warm_ratio", "cold_ratio")}
    names |= {f"engines.{f}" for f in ("steps", "fast_s", "des_s", "des_events_s", "des_over_fast", "des_events_over_fast",
                                        "agree_rel_diff")}
    names |= {f"speed.{p}.{f}" for p in ("ar", "confidence", "ecospec", "ecospec_oracle", "ecospec_auto", "evict")
              for f in ("cold_over_union", "warm_over_union", "api_repeat_over_union")}
    names |= {f"speed.{f}" for f in ("union_pass_s", "oracle.cold_over_union", "oracle.warm_over_union",
                                     "wide.evict_over_confidence", "wide.evict_over_union", "baseline_mb",
                                     "all_policy_peak_mb", "beyond_baseline_over_disk", "fixed_mb")}
    names |= {"sweep.local.configs_per_min", "sweep.ray.configs_per_min", "sweep.ray_over_local", "sweep.ray_equals_local"}
    names |= {f"sweep1000.{f}" for f in ("configurations", "wall_s", "configs_per_min", "cpu_s")}
    names |= {f"tracer.{f}" for f in ("hooks_on_ms", "hooks_off_ms", "on_over_off")}
    names |= {f"memory.{f}" for f in ("disk_mb", "arrays_mb", "whole_peak_rss_mb", "whole_rss_over_disk", "budget_mb",
                                      "pieces_peak_rss_mb", "pieces_over_whole", "budget_over_whole", "pieces_equal_whole",
                                      "baseline_mb", "all_policy_peak_rss_mb", "all_policy_beyond_baseline_over_disk",
                                      "tune_peak_rss_mb", "tune_beyond_baseline_over_disk")}
    return names


def _gpt_oss_20b_routing(path) -> None:
    """A small routing folder in the shared npz layout, gpt-oss-20b's shape (24 layers x 32, top-4)."""
    import numpy as np

    rng = np.random.default_rng(0)
    lens = np.array([60, 55, 58, 61, 50])
    e = np.argsort(rng.random((int(lens.sum()), 24, 32)), axis=-1)[..., :4].astype(np.int8)
    path.mkdir()
    np.savez(path / "routing.npz", expert_ids=e, token=rng.integers(0, 500, len(e)).astype(np.int32),
             seq_start=np.concatenate([[0], np.cumsum(lens)[:-1]]), seq_len=lens)
    (path / "meta.json").write_text(json.dumps({"model": "gpt-oss-20b", "experts": 32, "top_k": 4}))


def test_bench_quick_reports_every_figure(tmp_path):
    out = tmp_path / "bench.json"
    _gpt_oss_20b_routing(tmp_path / "routing")
    res = subprocess.run([str(ROOT / "bench" / "run"), "--quick", "--json", str(out), "--cache", str(tmp_path / "cache"),
                          "--routing", str(tmp_path / "routing")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHON": sys.executable})
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(out.read_text())
    optional = {"sweep": "ray", "tracer": "torch"}
    skipped = {b for b, mod in optional.items() if importlib.util.find_spec(mod) is None}
    assert set(doc["skipped"]) == skipped
    figures = {f"{f['bench']}.{f['name']}": f for f in doc["figures"]}
    want = {n for n in expected() if n.split(".")[0] not in skipped}
    assert want <= set(figures), sorted(want - set(figures))
    # quality: every trace, on the quick hardware, at every placement that fits, reports every policy
    per = ("ar_ms_per_token", "oracle_ms_per_token", "confidence_best_ms_per_token", "ecospec_best_ms_per_token",
           "auto_ms_per_token", "reference_ms_per_token", "evict_ms_per_token", "cascade_ms_per_token",
           "eagle2_default_ms_per_token", "sglang_default_ms_per_token", "vllm_chain_best_ms_per_token",
           "calibration_ece", "auto_over_confidence", "auto_of_reference", "winner_over_ar")
    for t in (*REAL, *SHAPES, "gpt-oss-20b-hybrid"):
        groups = {n.rsplit(".", 1)[0] for n in figures if n.startswith(f"quality.{t}.h200.")}
        assert groups, f"no quality figures for {t}"
        for g in groups:
            assert {f"{g}.{f}" for f in per} <= set(figures), g
    for name, f in figures.items():
        assert math.isfinite(f["value"]), name
    for name in ("engines.agree_rel_diff", "memory.pieces_equal_whole", "sweep.ray_equals_local"):
        if name in figures:
            assert figures[name]["met"], name
    assert doc["meta"]["quick"] and doc["meta"]["date"] and doc["meta"]["machine"]["cores"]
    assert figures["quality.gpt-oss-20b-hybrid.h200.hbm.ar_ms_per_token"]["note"].startswith("hybrid, gpt-oss-20b")
    # generated traces are cached under their preset's hash: a refitted preset is never served stale
    from ecosim.routing.presets import preset_hash

    cached = {p.name for p in (tmp_path / "cache" / "quick").iterdir()}
    for s in SHAPES:
        assert any(n.startswith(f"{s}-") and n.endswith(f"-preset{preset_hash(s)}") for n in cached), (s, cached)
    assert any(n.startswith("hybrid-gpt-oss-20b-") and f"-preset{preset_hash('gpt-oss-20b')}-" in n for n in cached), cached
    assert "figure" in res.stdout and "bench/run --quick" in res.stdout  # the one table at the end
