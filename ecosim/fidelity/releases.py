"""Engine-release serving profiles (sglang-0.4, sglang-0.5, trtllm, vllm-v1, ...) fitted on their own release's rows.

A published row's `release` names the serving profile of the engine release it was measured on, chosen from its
engine and version (its date where the source states no version; rows.py checks the name). A release profile is a
data file (catalog/data/serving/) with `base: cuda-graphs` that changes two things, fitted here on the release's
plain batch-1 rows (`separate` rows left out), everything else its base's:

    s  = step_fixed_s, seconds per step (a plain step is one token: it adds s to each token's time)
    k  = the fraction of the base's efficiencies the release reaches: bw_efficiency = k x 0.8,
         compute_efficiency = k x 0.5 (one factor for both: its kernels read and compute that much slower)

    (s, k) = argmin  sum_i (ln t_i(s, k) - ln y_i)^2        least squares on log tokens/s

t_i the row's predicted seconds per token, y_i the published one. k runs over a grid (0.200 to 1.250 in steps of
0.025: memory and compute combine in a max, so the step model prices each k rather than scaling one time), s over
0 and 1 us to 100 ms log-spaced (240 points). A release with fewer than MIN_ROWS plain rows fits k alone (s as
cuda-graphs'): two terms on two rows fit both exactly and predict nothing. Held out: each plain row predicted by the fit
on the release's other plain rows (leave-one-out, the same rule for the number of terms). The release's
speculative rows are predicted under the fitted profile, nothing fitted on them.

Rows whose `sim.profile` names an engine with experts in host memory (ktransformers, llama.cpp, ik_llama.cpp)
keep their own fit (fit.py, over HOST_FREE); they are reported per profile beside the releases.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.catalog.serving import DATA, ServingProfile, load_serving
from ecosim.fidelity.fit import Result
from ecosim.fidelity.pricing import _seconds, predict, price_row
from ecosim.fidelity.rows import PLAIN

K_GRID = np.round(np.arange(0.2, 1.2501, 0.025), 3)
S_GRID = np.concatenate([[0.0], np.geomspace(1e-6, 0.1, 240)])
MIN_ROWS = 3  # plain rows needed to fit both s and k; fewer: k alone
FITTED = ("step_fixed_s", "bw_efficiency", "compute_efficiency")


def release_of(row: dict[str, Any]) -> str | None:
    """The serving profile a row's own engine is priced with: its sim.profile (experts in host memory) or release."""
    return (row.get("sim") or {}).get("profile") or row.get("release")


def at_k(base: ServingProfile, root: ServingProfile, k: float, s: float | None = None) -> ServingProfile:
    """`base` with the efficiencies at k times `root`'s (the cuda-graphs base the release file names) and step s."""
    return dataclasses.replace(base, bw_efficiency=float(root.bw_efficiency * k),
                               compute_efficiency=float(root.compute_efficiency * k),
                               step_fixed_s=base.step_fixed_s if s is None else float(s))


@dataclass
class ReleaseFit:
    """One release profile's fit and its rows' errors (plain: fitted and held out; the rest under the fit)."""

    name: str
    terms: dict[str, float]
    fitted_on: list[str]
    plain: list[Result] = field(default_factory=list)  # error: in-sample; loo_error: held out
    other: list[Result] = field(default_factory=list)  # speculative rows under the fitted profile


STEP = ("step_fixed_s",)
NONE = np.zeros(0)  # theta over no free constants: a profile priced as it is


def _grid(rows: list[dict[str, Any]], base: ServingProfile, root: ServingProfile) -> tuple[np.ndarray, np.ndarray]:
    """Each plain row's seconds per token at s = 0 over K_GRID (rows x k) and what one second of s adds to it."""
    r = np.empty((len(rows), len(K_GRID)))
    f = np.empty(len(rows))
    for j, k in enumerate(K_GRID):
        prof = at_k(base, root, k)
        for i, row in enumerate(rows):
            lin = price_row(row, prof, STEP).plain_token  # the profile's other terms as they are, s free
            r[i, j], f[i] = lin.r, lin.f[0]
    return r, f


def _solve(r: np.ndarray, f: np.ndarray, y: np.ndarray, s_fixed: float) -> tuple[float, float]:
    """(k, s) minimising the log error over these rows; s fixed at s_fixed under MIN_ROWS rows."""
    s = S_GRID if len(y) >= MIN_ROWS else np.array([s_fixed])
    t = r[:, :, None] + s[None, None, :] * f[:, None, None]
    sse = ((np.log(t) - np.log(y)[:, None, None]) ** 2).sum(axis=0)
    j, m = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return float(K_GRID[j]), float(s[m])


def fit_release(name: str, rows: list[dict[str, Any]], fit: bool = True) -> ReleaseFit:
    """The release's profile fitted on its plain rows (as shipped with fit False) and every row of it predicted."""
    base = load_serving(name)
    root = load_serving("cuda-graphs")
    plain = [r for r in rows if r["metric"] in PLAIN and not r.get("separate")]
    if fit and plain:
        r, f = _grid(plain, base, root)
        y = np.array([_seconds(x) for x in plain])
        k, s = _solve(r, f, y, root.step_fixed_s)
        prof = at_k(base, root, k, s)
    else:
        r = f = y = None
        prof = base
    out = ReleaseFit(name, {t: float(getattr(prof, t)) for t in FITTED}, [x["id"] for x in plain] if fit else list(base.fitted_on))
    for row in rows:
        pred = predict(row, price_row(row, prof, ()), NONE)
        res = Result(row, pred, pred / row["value"] - 1, None, None)
        if row in plain:
            if r is not None and len(plain) > 1:
                keep = np.arange(len(plain)) != plain.index(row)
                k, s = _solve(r[keep], f[keep], y[keep], root.step_fixed_s)
                held = at_k(base, root, k, s)
                res.loo_error = predict(row, price_row(row, held, ()), NONE) / row["value"] - 1
            out.plain.append(res)
        else:
            out.other.append(res)
    return out


def fit_releases(rows: list[dict[str, Any]], fit: bool = True) -> list[ReleaseFit]:
    """Every GPU release named by a predicted row (sim.profile rows are fitted in fit.py), in order of appearance."""
    names: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("sim") and row.get("release") and not row["sim"].get("profile"):
            names.setdefault(row["release"], []).append(row)
    return [fit_release(n, members, fit) for n, members in names.items()]


def release_file(fit: ReleaseFit) -> dict[str, Any]:
    """The release's data file: its shipped description, base and sources, the fitted terms and their rows."""
    shipped = json.loads((DATA / f"{fit.name}.json").read_text())
    why = ("fitted by `ecosim fidelity --write-releases DIR` on this release's plain rows in fitted_on (fidelity/releases.py: "
           "least squares on log tokens/s over step_fixed_s and one factor k on both efficiencies")
    return {**shipped, **fit.terms, "sources": {**shipped.get("sources", {}), **{t: f"{why})" for t in FITTED}},
            "fitted_on": fit.fitted_on}


def write_releases(fits: list[ReleaseFit], folder: Path) -> None:
    """Each fitted release profile into `folder` (new), as the shipped files hold them."""
    folder.mkdir(parents=True)
    for fit in fits:
        (folder / f"{fit.name}.json").write_text(json.dumps(release_file(fit), indent=1) + "\n")
