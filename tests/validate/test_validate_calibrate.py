"""Calibration recovers known hardware from a synthetic timing model driven through a fake clock."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ecosim.catalog.devices import Device, get_device
from ecosim.catalog.models import ModelShape
from ecosim.catalog.serving import load_serving
from ecosim.cost import CostConfig, CostModel
from validate.calibrate import HUGE, CalibConfig, Samples, deal, fit, measure, predict, profile, union_levels
from validate.clock import FakeClock

# the trained default's shape, widened x16 (fp32): 4 MoE layers, 32 experts, top-4
SHAPE = ModelShape(
    name="fake-x16", family="qwen3_moe", num_layers=4, moe_layers=(0, 1, 2, 3), num_experts=32, top_k=4,
    num_shared_experts=0, hidden_size=192, moe_intermediate_size=1024, vocab_size=2048,
    expert_bytes=3 * 192 * 1024 * 4, dense_bytes=3_500_000, kv_bytes_per_token=3072, bytes_per_param=4.0,
)


class FakeBench:
    """Hardware that *is* a cost model: each run advances the clock by CostModel's price of it,
    times a seeded multiplicative noise."""

    def __init__(self, clock: FakeClock, device: Device, noise: float = 0.01, seed: int = 0):
        self.shape, self.clock = SHAPE, clock
        self.cost = CostModel(SHAPE, device, config=CostConfig())
        self.noise, self.rng = noise, np.random.default_rng(seed)
        self.ctx, self.t = 0, 0.0

    def _jitter(self) -> float:
        return float(1.0 + self.noise * self.rng.standard_normal())

    def set_context(self, tokens: int) -> None:
        self.ctx = tokens

    def prepare_verify(self, experts: np.ndarray, parents=None) -> None:
        n, layers, _ = experts.shape
        union = np.array([[len(np.unique(experts[:, j])) for j in range(layers)]], dtype=np.float64)
        self.t = float(self.cost.step_times(union, np.array([n]), np.array([self.ctx]), speculative=False)[0])

    def run_verify(self) -> None:
        self.clock.advance(self.t * self._jitter())

    def after_verify(self) -> None:
        pass

    def prepare_draft(self, accepted: int) -> None:
        pass

    def run_draft(self) -> None:
        self.clock.advance(self.cost.device.draft_time_s * self._jitter())

    def after_draft(self) -> None:
        pass


def true_device(overlap: str) -> Device:
    return Device("truth", hbm_bw=6.5e9, hbm_bytes=0, peak_bf16=40e9, peak_fp8=40e9, link_bw=1, pcie_bw=1,
                  step_overhead_s=2.4e-3, bw_efficiency=1.0, compute_efficiency=1.0, overlap=overlap, draft_time_s=11e-3)


@pytest.mark.parametrize("overlap", ["sum", "max"])
def test_recovers_known_parameters(overlap):
    truth = true_device(overlap)
    clock = FakeClock()
    cfg = CalibConfig(contexts=(40, 120), repeats=5, overlap=overlap)
    samples = measure(FakeBench(clock, truth), clock, cfg)
    f = fit(samples, SHAPE, overlap)
    assert f.bw == pytest.approx(truth.hbm_bw, rel=0.02)
    assert f.peak == pytest.approx(truth.peak_bf16, rel=0.05)
    assert f.overhead_s == pytest.approx(truth.step_overhead_s, rel=0.05)
    assert f.draft_time_s == pytest.approx(truth.draft_time_s, rel=0.02)
    assert f.rel_rmse < 0.01 and f.max_rel_err < 0.03


def test_exact_without_noise_and_predictions_are_the_cost_models():
    truth = true_device("sum")
    clock = FakeClock()
    samples = measure(FakeBench(clock, truth, noise=0.0), clock, CalibConfig(repeats=1, contexts=(64,)))
    f = fit(samples, SHAPE, "sum")
    assert f.bw == pytest.approx(truth.hbm_bw, rel=1e-6)
    assert f.peak == pytest.approx(truth.peak_bf16, rel=1e-6)
    assert f.overhead_s == pytest.approx(truth.step_overhead_s, rel=1e-6)
    n, u, c, y, _ = samples.cases()
    assert np.allclose(predict(f, SHAPE, n, u, c), y, rtol=1e-9)


def test_no_compute_term_when_time_ignores_tokens():
    """Per-token compute too small to see: the fit drops it (peak 'infinite') instead of going negative."""
    truth = Device("t", 5e9, 0, 1e30, 1e30, 1, 1, step_overhead_s=1e-3, bw_efficiency=1.0, compute_efficiency=1.0,
                   overlap="sum", draft_time_s=5e-3)
    clock = FakeClock()
    samples = measure(FakeBench(clock, truth, noise=0.0), clock, CalibConfig(repeats=1, contexts=(64,)))
    f = fit(samples, SHAPE, "sum")
    assert f.peak == HUGE and f.bw == pytest.approx(5e9, rel=1e-6) and not f.warnings


def test_profile_is_a_device_ecosim_reads(tmp_path):
    truth = true_device("sum")
    clock = FakeClock()
    cfg = CalibConfig(repeats=2, contexts=(64,))
    samples = measure(FakeBench(clock, truth), clock, cfg)
    f = fit(samples, SHAPE, "sum")
    doc = profile(f, cfg, samples, SHAPE, {"name": "fake", "memory_bytes": 1e9, "source": "test"})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    dev = get_device(str(path))
    assert dev.hbm_bw == f.bw and dev.draft_time_s == f.draft_time_s and dev.overlap == "sum"
    assert dev.bw_efficiency == 1.0 and dev.compute_efficiency == 1.0 and dev.step_overhead_s == f.overhead_s
    cost = CostModel(SHAPE, dev, config=CostConfig(draft_time_s=None))
    assert cost.draft_time(speculative=True) == f.draft_time_s  # the profile's draft time is charged
    assert CostModel(SHAPE, dev, config=CostConfig(draft_time_s=1.0)).draft_time(True) == 1.0  # a flag still wins
    assert len(doc["calibration"]["cases"]) == len(samples.cases()[0])
    # the same file is a serving profile (`--profile`): the measured terms, nothing it did not measure
    serving = load_serving(str(path))
    assert serving.step_fixed_s == f.overhead_s and serving.overlap == "sum"
    assert serving.kernel_latency_s == 0.0 and serving.collective_latency_s == 0.0 and serving.gemm_tile_rows == 0.0
    assert cost.terms.serving == serving.name and cost.step_overhead == f.overhead_s


def test_deal_gives_exact_unions():
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 16):
        for u in union_levels(n, 4, 32, 4):
            e = deal(n, u, 3, 4, 32, rng)
            assert e.shape == (n, 3, 4)
            for j in range(3):
                assert len(np.unique(e[:, j])) == u
                assert all(len(set(row)) == 4 for row in e[:, j])  # distinct experts per token
    with pytest.raises(ValueError):
        deal(1, 8, 1, 4, 32, rng)


def test_too_few_cases_is_one_line_error():
    from ecosim.errors import EcoSimError

    s = Samples(case=[0], kinds=["grid"], tokens=[1], unions=[[4]], contexts=[8], seconds=[1e-3], draft_seconds=[1e-3])
    with pytest.raises(EcoSimError, match="at least 3"):
        fit(s, SHAPE)


def test_overhead_bound_model_gets_a_profile_with_a_warning():
    """Time that ignores the bytes read (a tiny model on a CPU): no bandwidth, said in a warning."""
    truth = Device("t", 1e30, 0, 1e30, 1e30, 1, 1, step_overhead_s=3e-3, bw_efficiency=1.0, compute_efficiency=1.0,
                   overlap="sum", draft_time_s=5e-3)
    clock = FakeClock()
    samples = measure(FakeBench(clock, truth, noise=0.0), clock, CalibConfig(repeats=1, contexts=(64,)))
    f = fit(samples, SHAPE, "sum")
    assert f.bw == HUGE and f.peak == HUGE and f.overhead_s == pytest.approx(3e-3)
    assert any("no bandwidth" in w for w in f.warnings)


def test_overhead_bound_profile_is_one_the_gate_reads_back():
    """No measurable bandwidth or compute: the profile stores the highest rates a profile may hold (the
    same ~zero time per byte and FLOP), so `--hardware FILE` accepts what `validate calibrate` wrote."""
    from ecosim.gate import check
    from ecosim.gate.profiles import EFLOP_S, PB_S

    truth = Device("t", 1e30, 0, 1e30, 1e30, 1, 1, step_overhead_s=3e-3, bw_efficiency=1.0, compute_efficiency=1.0,
                   overlap="sum", draft_time_s=5e-3)
    clock = FakeClock()
    samples = measure(FakeBench(clock, truth, noise=0.0), clock, CalibConfig(repeats=1, contexts=(64,)))
    f = fit(samples, SHAPE, "sum")
    doc = profile(f, CalibConfig(repeats=1, contexts=(64,)), samples, SHAPE,
                  {"name": "cpu", "memory_bytes": 1e10, "source": "test"})
    assert doc["hbm_bw"] == PB_S and doc["peak_bf16"] == doc["peak_fp8"] == EFLOP_S and doc["link_bw"] == PB_S
    assert doc["calibration"]["fit"]["bw"] == HUGE  # the fit itself still says "not measurable"
    check("hardware profile", doc, "p.json")


def test_trace_design_forces_recorded_subtrees(self_trace):
    """Cases cut from the recorded trees: ancestor-closed, their recorded routing, all strategies."""
    from validate.calibrate import trace_design

    cfg = CalibConfig(tokens=(1, 3, 6), levels=2)
    cases = trace_design(self_trace, cfg, np.random.default_rng(0))
    assert [c.n for c in cases] == [1, 1] + [3] * 4 + [6] * 4
    assert {c.kind for c in cases} == {"trace root", "trace confidence", "trace random", "trace min-union", "trace max-union"}
    recorded = {tuple(map(tuple, e)) for e in self_trace.experts_3d().tolist()}
    for c in cases:
        assert c.parents[0] == -1 and all(0 <= p < i for i, p in enumerate(c.parents) if i)
        assert all(tuple(map(tuple, e)) in recorded for e in c.experts.tolist())
    by = {c.kind: sum(c.union) for c in cases if c.n == 6}
    assert by["trace min-union"] <= by["trace max-union"]
    # the synthetic hardware (priced with SHAPE, over however many layers the cases have) is recovered
    truth = true_device("sum")
    clock = FakeClock()
    samples = measure(FakeBench(clock, truth, noise=0.0), clock, CalibConfig(repeats=1, contexts=(16, 48)), design=cases)
    f = fit(samples, SHAPE)
    assert f.bw == pytest.approx(truth.hbm_bw, rel=1e-6) and f.overhead_s == pytest.approx(truth.step_overhead_s, rel=1e-6)


def test_a_calibrated_profile_prices_ar_and_speculative_steps_with_the_same_terms():
    """By hand (SHAPE: e = 2,359,296 B per expert, 589,824 parameters; dense 3.5 MB = 875,000
    parameters; KV 3072 B per token; 4 MoE layers x top-4): bw 10 GB/s, 20 GFLOP/s, 5 ms overhead,
    12 ms draft. A one-token (ar) step, 16 experts, context 100:
    bytes 16 e + 3.5e6 + 101 x 3072 = 41,559,008 -> 4.1559008 ms; FLOPs 2 (16 x 589,824 + 875,000)
    = 20,624,368 -> 1.0312184 ms; + 5 ms = 10.1871192 ms. The same step speculative: + the draft
    only (12 ms). A 3-token speculative step, union 22: 55,720,928 B -> 5.5720928 ms, 61,873,104
    FLOPs -> 3.0936552 ms, + 5 + 12 = 25.665748 ms. Per-layer kernel latency and the per-step
    term are one constant on one device: moving 48 kernels x 50 us from one to the other prices
    every step alike (the fit's overhead is their sum)."""
    import dataclasses

    from validate.calibrate import Fit, device_of

    f = Fit(bw=10e9, peak=20e9, overhead_s=5e-3, draft_time_s=12e-3, overlap="sum", cases=3, rel_rmse=0.0,
            max_rel_err=0.0, r2=1.0)
    dev = device_of(f, "hand", 1e9)
    cost = CostModel(SHAPE, dev, config=CostConfig())
    union = np.array([[4, 4, 4, 4], [6, 5, 4, 7]], dtype=np.float64)
    tokens, ctx = np.array([1, 3]), np.array([100, 100])
    plain = cost.step_times(union, tokens, ctx, speculative=False)
    spec = cost.step_times(union, tokens, ctx, speculative=True)
    assert plain[0] == pytest.approx(10.1871192e-3, rel=1e-12)
    assert spec[0] == pytest.approx(22.1871192e-3, rel=1e-12)
    assert spec[1] == pytest.approx(25.665748e-3, rel=1e-12)
    assert np.allclose(spec - plain, 12e-3, rtol=0, atol=1e-15)  # no speculative term beyond the measured draft
    assert SHAPE.kernels_per_step == 48
    moved = dataclasses.replace(dev, step_overhead_s=5e-3 - 48 * 50e-6,
                                serving=dataclasses.replace(dev.serving, step_fixed_s=5e-3 - 48 * 50e-6, kernel_latency_s=50e-6))
    cost2 = CostModel(SHAPE, moved, config=CostConfig())
    assert np.allclose(cost2.step_times(union, tokens, ctx, speculative=True), spec, rtol=1e-12)
    assert np.allclose(cost2.step_times(union, tokens, ctx, speculative=False), plain, rtol=1e-12)
