"""Placements as types in a registry: parsing, capacity checks, and adding one in two files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from ecosim.catalog.devices import get_device
from ecosim.catalog.models import get_model
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.placements import PLACEMENTS, Placement, parse_placement, register
from ecosim.placements.registry import PLACEMENTS as REGISTRY
from ecosim.replay import TraceReplay
from ecosim.policies import PolicySpec
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import read_trace


def ecosim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ), timeout=300)


@pytest.mark.parametrize("text,canonical,devices,groups", [
    ("hbm", "hbm", 1, 1), ("tp:8", "tp:8", 8, 1), ("EP:8", "ep:8", 8, 8), ("tp:4+ep:2", "tp:4+ep:2", 8, 2),
    ("offload:64", "offload:64:lru", 1, 1), ("offload:64:lfu", "offload:64:lfu", 1, 1),
    ("dpattn+ep:4", "dpattn+ep:4", 4, 4),
])
def test_parse(text, canonical, devices, groups):
    p = parse_placement(text)
    assert str(p) == canonical and p.devices == devices and p.groups == groups
    assert parse_placement(str(p)) == p


@pytest.mark.parametrize("text", ["", "tp", "tp:0", "ep:x", "offload:8:fifo", "tp:2+ep", "ep:2+tp:2", "hbm:1", "dpattn",
                                  "dpattn+ep:0", "dpattn+tp:2"])
def test_bad_placements_are_one_line_errors(text):
    with pytest.raises(EcoSimError, match="expected one of hbm, tp:N, ep:N, tp:N\\+ep:M, offload"):
        parse_placement(text)


@dataclass(frozen=True)
class Mirror(Placement):
    """A throwaway placement: every expert on both of two devices, each serving half the tokens'
    experts (so each reads half the union), no collectives. Defined and registered here only."""

    syntax = "mirror"
    summary = "mirror (test only)"

    @classmethod
    def parse(cls, text: str):
        return cls() if text == "mirror" else None

    def __str__(self) -> str:
        return "mirror"

    @property
    def devices(self) -> int:
        return 2

    @property
    def expert_fraction(self) -> float:
        return 0.5


def test_a_new_placement_is_one_class_and_one_registry_line(tmp_path):
    register(Mirror)
    try:
        assert Mirror in PLACEMENTS and parse_placement("mirror") == Mirror()
        write_synthetic(tmp_path / "t", get_model("olmoe-1b-7b"), SynthConfig(requests=1, positions=16))
        r = TraceReplay(read_trace(tmp_path / "t"))
        dev = get_device("h100")
        rows = {p: r.run(PolicySpec("confidence", 8), CostModel(r.trace.model, dev, parse_placement(p), CostConfig(mode="experts-only")))
                for p in ("hbm", "mirror")}
        assert rows["mirror"].time_s == pytest.approx(rows["hbm"].time_s / 2)
    finally:
        REGISTRY.remove(Mirror)
    with pytest.raises(EcoSimError):
        parse_placement("mirror")


DSV3 = get_model("deepseek-v3.1")


def test_deepseek_on_one_h200_is_refused_with_what_fits():
    h200 = get_device("h200")
    with pytest.raises(EcoSimError) as e:
        CostModel(DSV3, h200, parse_placement("hbm")).check(4096)
    msg = str(e.value)
    assert "\n" not in msg and "deepseek-v3.1" in msg and "ep:8 or tp:8" in msg and "offload:" in msg
    for ok in ("ep:8", "tp:8", "tp:4+ep:2"):
        CostModel(DSV3, h200, parse_placement(ok)).check(4096)
    with pytest.raises(EcoSimError, match="ep:8 or tp:8"):
        CostModel(DSV3, h200, parse_placement("ep:4")).check(4096)


def test_suggested_offload_fits_and_one_more_expert_does_not():
    h200 = get_device("h200")
    with pytest.raises(EcoSimError) as e:
        CostModel(DSV3, h200, parse_placement("hbm")).check(0)
    cap = int(str(e.value).rsplit("offload:", 1)[1].split()[0])
    CostModel(DSV3, h200, parse_placement(f"offload:{cap}")).check(0)
    with pytest.raises(EcoSimError):
        CostModel(DSV3, h200, parse_placement(f"offload:{cap + 1}")).check(0)


def test_offload_as_large_as_the_layer_is_hbm_by_another_name():
    with pytest.raises(EcoSimError, match="hbm by another name"):
        CostModel(get_model("gpt-oss-20b"), get_device("h100"), parse_placement("offload:999")).check(0)


def test_kv_of_a_long_context_counts():
    m, dev = get_model("qwen3-30b-a3b"), get_device("h100")
    CostModel(m, dev, parse_placement("hbm")).check(1024)
    with pytest.raises(EcoSimError, match="KV"):
        CostModel(m, dev, parse_placement("hbm")).check(2_000_000)


def test_per_group_unions_sum_to_the_union():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**63, (5, 3, 4), dtype=np.uint64)
    total = parse_placement("hbm").union_per_group(bits, 256)[..., 0]
    for p in ("ep:8", "tp:2+ep:4"):
        assert (parse_placement(p).union_per_group(bits, 256).sum(axis=-1) == total).all()
    assert (parse_placement("tp:8").union_per_group(bits, 256)[..., 0] == total).all()


@pytest.fixture(scope="module")
def dsv3_trace(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dsv3") / "t"
    write_synthetic(d, DSV3, SynthConfig(requests=1, positions=8, prompt_len=32))
    return d


def test_cli_refuses_an_impossible_replay_in_one_line(dsv3_trace):
    r = ecosim("replay", str(dsv3_trace), "--policy", "ar")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "ep:8 or tp:8" in lines[0] and "Traceback" not in r.stderr
    ok = ecosim("replay", str(dsv3_trace), "--policy", "ar", "--placement", "tp:8", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["placement"] == "tp:8" and out["used"]["serving"] == "cuda-graphs"


def test_sweep_skips_impossible_points_and_says_how_many(dsv3_trace, tmp_path):
    r = ecosim("sweep", str(dsv3_trace), "--out", str(tmp_path / "s"), "--policy", "confidence", "--budget", "4",
               "--placement", "hbm,ep:8", "--jobs", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["impossible"] == out["configurations"] == 3  # ar, confidence, oracle under each placement
    assert {w["placement"] for w in out["winner"]["winners"]} == {"ep:8"}
    assert "hbm" in out["impossible_reasons"][0]
    allbad = ecosim("sweep", str(dsv3_trace), "--out", str(tmp_path / "s2"), "--placement", "hbm", "--jobs", "1")
    assert allbad.returncode == 2 and len(allbad.stderr.strip().splitlines()) == 1


def test_dp_attention_holds_the_whole_dense_weights_and_kv_on_each_device():
    """dpattn+ep:8 holds ep:8's experts plus every dense byte and the whole KV cache per device."""
    m = get_model("deepseek-v3.1")
    (w_ep, kv_ep), (w_dp, kv_dp) = (parse_placement(p).bytes_per_device(m, 4096) for p in ("ep:8", "dpattn+ep:8"))
    assert w_dp - w_ep == pytest.approx(m.dense_bytes * (1 - 1 / 8))
    assert kv_dp == pytest.approx(8 * kv_ep)
