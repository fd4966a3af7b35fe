"""Fitting: the cost model's four unknowns (bandwidth, compute, overhead, draft time) from samples.

Least squares weighted by 1/t, non-negative coefficients (package docstring); predictions go
through ecosim's CostModel itself, so the fit is judged by the formula replay uses.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.catalog.serving import ServingProfile
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.gate.profiles import EFLOP_S, PB_S
from validate.calibrate.timing import Samples

HUGE = 1e30  # bytes/s or FLOP/s standing for "no measurable time" (a zero coefficient in the fit)
MEASURABLE = 1e20  # a fitted rate above this (bytes/s, FLOP/s) is float noise around a zero coefficient


@dataclass
class Fit:
    """Fitted hardware parameters and how well they explain the medians they were fitted on."""

    bw: float  # bytes/s (HUGE: no measurable byte-dependent time)
    peak: float  # FLOP/s (HUGE: no measurable per-token compute)
    overhead_s: float
    draft_time_s: float
    overlap: str
    cases: int
    rel_rmse: float  # root mean square of (predicted - measured) / measured over the cases
    max_rel_err: float
    r2: float
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The fit as the profile's `calibration.fit` object."""
        return asdict(self)


def _features(shape: ModelShape, n: np.ndarray, u: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and FLOPs of each case as the cost model counts them (overlap "sum")."""
    m = shape
    nbytes = u.sum(axis=1) * float(m.expert_bytes) + float(m.dense_bytes) + (c + n) * float(m.kv_bytes_per_token)
    flops = 2.0 * n * (m.top_k * m.num_moe_layers * float(m.expert_params) + m.dense_params)
    return nbytes, flops


def _nnls_weighted(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """min ||w (X b - y)|| with b >= 0, by trying every subset of active columns (few columns)."""
    best, best_err = np.zeros(X.shape[1]), np.inf
    Xw, yw = X * w[:, None], y * w
    for r in range(1, X.shape[1] + 1):
        for cols in itertools.combinations(range(X.shape[1]), r):
            b, *_ = np.linalg.lstsq(Xw[:, cols], yw, rcond=None)
            if (b < 0).any():
                continue
            full = np.zeros(X.shape[1])
            full[list(cols)] = b
            err = float(np.sum((Xw @ full - yw) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def _max_model(shape: ModelShape, n: np.ndarray, u: np.ndarray, c: np.ndarray, bw: float, peak: float) -> np.ndarray:
    """Seconds of each case under overlap "max", without the overhead."""
    m = shape
    layer = np.maximum(u * float(m.expert_bytes) / bw, (2.0 * n * m.top_k * float(m.expert_params) / peak)[:, None]).sum(axis=1)
    dense = np.maximum(float(m.dense_bytes) / bw, 2.0 * n * m.dense_params / peak)
    return layer + dense + (c + n) * float(m.kv_bytes_per_token) / bw


def fit(samples: Samples, shape: ModelShape, overlap: str = "sum") -> Fit:
    """Least-squares fit of the cost model to the medians of `samples` (module docstring)."""
    n, u, c, y, _ = samples.cases()
    if len(y) < 3:
        raise EcoSimError(f"calibration: {len(y)} distinct cases; at least 3 are needed to fit")
    if not samples.draft_seconds:
        raise EcoSimError("calibration: no draft timings")
    w = 1.0 / y
    nbytes, flops = _features(shape, n, u, c)
    if overlap == "sum":
        coef = _nnls_weighted(np.stack([nbytes, flops, np.ones_like(y)], axis=1), y, w)
        bw = 1.0 / coef[0] if coef[0] > 1.0 / MEASURABLE else HUGE
        peak = 1.0 / coef[1] if coef[1] > 1.0 / MEASURABLE else HUGE
        overhead = float(coef[2])
    else:
        bw, peak, overhead = _fit_max(shape, n, u, c, y, w, nbytes, flops)
    fit_ = Fit(bw, peak, overhead, float(np.median(samples.draft_seconds)), overlap, len(y), 0.0, 0.0, 0.0)
    pred = predict(fit_, shape, n, u, c)
    rel = (pred - y) / y
    fit_.rel_rmse = float(np.sqrt(np.mean(rel**2)))
    fit_.max_rel_err = float(np.max(np.abs(rel)))
    fit_.r2 = float(1.0 - np.sum((pred - y) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-300))
    if fit_.bw >= HUGE:
        fit_.warnings.append("time does not grow with the bytes read: no bandwidth could be fitted (the model is "
                             "overhead-bound here; widen its experts with tracer.widen to make expert reads count)")
    if fit_.rel_rmse > 0.1:
        fit_.warnings.append(f"the fit misses the measured medians by {fit_.rel_rmse:.0%} rms: noisy timings "
                             "(other load on the machine?) or a device the cost model's form does not describe")
    return fit_


def _fit_max(shape, n, u, c, y, w, nbytes, flops) -> tuple[float, float, float]:
    """Grid search over (bw, peak) in logs, three passes, overhead = weighted mean residual (>= 0)."""
    # start around the "sum" solution's scale: bytes/time and flops/time of the cases
    bw_c = float(np.median(nbytes / y))
    pk_c = float(np.median(flops / y))
    lo_bw, hi_bw = np.log(bw_c) - np.log(100), np.log(bw_c) + np.log(100)
    lo_pk, hi_pk = np.log(pk_c) - np.log(1e3), np.log(pk_c) + np.log(1e6)
    best = (np.inf, bw_c, pk_c, 0.0)
    ww = w**2
    for _ in range(3):
        for lb in np.linspace(lo_bw, hi_bw, 41):
            for lp in np.linspace(lo_pk, hi_pk, 41):
                base = _max_model(shape, n, u, c, float(np.exp(lb)), float(np.exp(lp)))
                ov = max(0.0, float(np.sum(ww * (y - base)) / np.sum(ww)))
                err = float(np.sum(ww * (base + ov - y) ** 2))
                if err < best[0]:
                    best = (err, float(np.exp(lb)), float(np.exp(lp)), ov)
        step_b, step_p = (hi_bw - lo_bw) / 40, (hi_pk - lo_pk) / 40
        lo_bw, hi_bw = np.log(best[1]) - 2 * step_b, np.log(best[1]) + 2 * step_b
        lo_pk, hi_pk = np.log(best[2]) - 2 * step_p, np.log(best[2]) + 2 * step_p
    return best[1], best[2], best[3]


def device_of(fit_: Fit, name: str, memory_bytes: float, link_bw: float | None = None, pcie_bw: float | None = None,
              source: str = "") -> Device:
    """The Device a fit describes (unmeasured links default to the fitted bandwidth), carrying its
    serving terms in the format of ecosim's serving profiles (catalog/serving.py): the measured step
    overhead and overlap, efficiencies 1 (the fitted rates are already achieved ones), and zero
    per-kernel and collective terms (one device, fitted as a whole step)."""
    # a rate with no measurable time (HUGE) is stored as the highest one a profile may hold: the same
    # zero time per byte or FLOP to within nanoseconds, and a file the input gate reads back
    bw, peak = min(fit_.bw, PB_S), min(fit_.peak, EFLOP_S)
    serving = ServingProfile(name=f"calibrated {name}", step_fixed_s=fit_.overhead_s, overlap=fit_.overlap,
                             source=f"validate calibrate: {source}")
    return Device(serving=serving,
        name=name, hbm_bw=bw, hbm_bytes=float(memory_bytes), peak_bf16=peak, peak_fp8=peak,
        link_bw=float(link_bw or bw), pcie_bw=float(pcie_bw or bw), step_overhead_s=fit_.overhead_s,
        bw_efficiency=1.0, compute_efficiency=1.0, overlap=fit_.overlap, draft_time_s=fit_.draft_time_s, source=source,
    )


def predict(fit_: Fit, shape: ModelShape, n: np.ndarray, u: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Verify seconds of cases through ecosim's CostModel itself (not a copy of its formula)."""
    cost = CostModel(shape, device_of(fit_, "fit", 0.0), config=CostConfig())
    return cost.step_times(u.astype(np.float64), n, c, speculative=False)
