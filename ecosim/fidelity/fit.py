"""The serving profile's free constants fitted on the declared fit set, and every row predicted (`run`).

theta minimises the relative error of seconds per token over the rows marked `fit: true` (plain rows and
speculative tok/s rows), non-negative; leave-one-out refits without each fit row to predict it. Rows naming an
engine profile of their own (`sim.profile`) are fitted apart, each group on its own fit rows over HOST_FREE.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecosim.catalog.serving import ServingProfile, load_serving
from ecosim.errors import EcoSimError
from ecosim.fidelity.pricing import FREE, HOST_FREE, Priced, _seconds, _time, predict, price_row
from ecosim.fidelity.rows import PLAIN, load_rows


def fit_theta(rows: list[dict[str, Any]], priced: dict[str, Priced]) -> np.ndarray:
    """Non-negative theta minimising sum ((t(theta) - y) / y)^2 over the fit rows (every subset of
    active constants solved by least squares; 5 constants, so 31 subsets)."""
    use = [r for r in rows if r["metric"] in (*PLAIN, "spec_tok_s") and r["id"] in priced]
    if not use:
        raise EcoSimError("fidelity: no plain-decode or speculative tok/s row in the fit set")
    y = np.array([_seconds(r) for r in use])
    lin = [_time(r, priced[r["id"]]) for r in use]
    X = np.array([x.f for x in lin]) / y[:, None]
    b = (y - np.array([x.r for x in lin])) / y
    n = X.shape[1]
    best, err = np.zeros(n), float(np.sum(b**2))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sol, *_ = np.linalg.lstsq(X[:, cols], b, rcond=None)
            if (sol < 0).any():
                continue
            theta = np.zeros(n)
            theta[list(cols)] = sol
            e = float(np.sum((X @ theta - b) ** 2))
            if e < err:
                best, err = theta, e
    return best


@dataclass
class Result:
    row: dict[str, Any]
    predicted: float
    error: float  # (predicted - published) / published
    loo_error: float | None  # the same with theta fitted without this row (fit rows only)
    accept_len: float | None
    terms: dict[str, float] | None = None  # an engine profile's own fitted terms (rows with sim.profile), else None


def run(base: ServingProfile, fit: bool = True, rows: list[dict[str, Any]] | None = None,
        progress: Callable[[str], None] | None = None) -> tuple[list[Result], np.ndarray, list[dict[str, Any]]]:
    """Predict every row; returns the results, the theta used, and the rows not predicted. Rows naming an engine
    profile (`sim.profile`) are fitted apart over HOST_FREE, each group on its own fit rows; their terms are in
    each Result's `terms`."""
    rows = load_rows() if rows is None else rows
    todo = [r for r in rows if r.get("sim")]
    groups: dict[str | None, list[dict[str, Any]]] = {}
    for r in todo:
        groups.setdefault(r["sim"].get("profile"), []).append(r)
    results: dict[str, Result] = {}
    theta = np.array([getattr(base, k) for k in FREE])
    for name, members in groups.items():
        b, free = (base, FREE) if name is None else (load_serving(name), HOST_FREE)
        got, th = _run_group(b, free, fit, members, progress)
        results.update({x.row["id"]: x for x in got})
        if name is None:
            theta = th
        else:
            for x in got:
                x.terms = dict(zip(free, map(float, th)))
    return [results[r["id"]] for r in todo], theta, [r for r in rows if not r.get("sim")]


def _run_group(base: ServingProfile, free: tuple[str, ...], fit: bool, todo: list[dict[str, Any]],
               progress: Callable[[str], None] | None) -> tuple[list[Result], np.ndarray]:
    priced: dict[str, Priced] = {}
    for r in todo:
        if progress:
            progress(r["id"])
        priced[r["id"]] = price_row(r, base, free)
    fit_rows = [r for r in todo if r.get("fit")]
    theta = fit_theta(fit_rows, priced) if fit and fit_rows else np.array([getattr(base, k) for k in free])
    out = []
    for r in todo:
        p = priced[r["id"]]
        pred = predict(r, p, theta)
        loo = None
        if fit and r.get("fit"):
            others = [x for x in fit_rows if x["id"] != r["id"]]
            loo = predict(r, p, fit_theta(others, priced)) / r["value"] - 1 if others else None
        out.append(Result(r, pred, pred / r["value"] - 1, loo, p.accept_len))
    return out, theta


def fitted_profile(base: ServingProfile, theta: np.ndarray, fit_ids: list[str]) -> ServingProfile:
    """`base` with theta written in and the rows it was fitted on."""
    return dataclasses.replace(base, **{k: float(v) for k, v in zip(FREE, theta)}, fitted_on=tuple(fit_ids))
