"""The errors of `run`'s results summarised per group of metric, and per engine profile (`ecosim fidelity`'s summary)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim.fidelity.fit import Result
from ecosim.fidelity.releases import ReleaseFit
from ecosim.fidelity.rows import PLAIN


def stats(errs: list[float]) -> dict[str, Any]:
    """Count, median and worst absolute error, and how many are within 10%, 15% and 30%."""
    a = np.abs(np.array(errs))
    if not len(a):
        return {"rows": 0}
    return {"rows": int(len(a)), "median_abs_error": float(np.median(a)), "worst_abs_error": float(a.max()),
            "within_15pct": int((a <= 0.15).sum()), "within_30pct": int((a <= 0.30).sum()),
            "within_10pct": int((a <= 0.10).sum())}


def summary(results: list[Result]) -> dict[str, Any]:
    """Per group of metric: count, median and worst absolute error, within 15% / 30% (plain on
    held-out rows and on all rows; leave-one-out over the plain rows), sign right for speedups.
    Rows marked `separate` are left out of every group and listed under "separate" with their errors."""
    apart = [x for x in results if x.row.get("separate")]
    host = [x for x in results if x.row["sim"].get("profile") and not x.row.get("separate")]  # engines fitted apart
    results = [x for x in results if not x.row.get("separate") and not x.row["sim"].get("profile")]
    plain = [x for x in results if x.row["metric"] in PLAIN]
    out: dict[str, Any] = {
        "plain_all": stats([x.error for x in plain]),
        "plain_held_out": stats([x.error for x in plain if not x.row.get("fit")]),
        "plain_fit_set": stats([x.error for x in plain if x.row.get("fit")]),
        "plain_leave_one_out": stats([x.loo_error if x.loo_error is not None else x.error for x in plain]),
    }
    sp = [x for x in results if x.row["metric"] == "spec_speedup"]
    out["spec_speedup"] = {**stats([x.error for x in sp]),
                           "sign_right": int(sum((x.predicted > 1) == (x.row["value"] > 1) for x in sp))}
    out["spec_tok_s"] = stats([x.error for x in results if x.row["metric"] == "spec_tok_s"])
    out["verify_step_ratio"] = stats([x.error for x in results if x.row["metric"] == "verify_step_ratio"])
    out["separate"] = [{"id": x.row["id"], "metric": x.row["metric"], "error": x.error, "why": x.row["separate"]} for x in apart]
    if host:  # experts in host memory: each engine profile fitted on its own rows (absent where a table has none)
        hp = [x for x in host if x.row["metric"] in PLAIN]
        out["host_plain_held_out"] = stats([x.error for x in hp if not x.row.get("fit")])
        out["host_plain_fit_set"] = stats([x.error for x in hp if x.row.get("fit")])
        out["host_step_ratio"] = stats([x.error for x in host if x.row["metric"] == "step_ratio" and not x.row.get("fit")])
    return out



SPECULATIVE = ("spec_speedup", "spec_tok_s", "verify_step_ratio")


def per_profile(results: list[Result], releases: list[ReleaseFit], theta: dict[str, float]) -> dict[str, Any]:
    """Plain and speculative error per engine profile, each plain median in sample and held out (`separate` rows
    left out): cuda-graphs over every GPU row (held out: the rows outside its declared fit set); each release
    profile over its own rows (held out: leave-one-out within the release, releases.py); each host-memory engine
    over its `sim.profile` rows (held out: the rows outside its fit set)."""
    kept = [x for x in results if not x.row.get("separate")]
    out: dict[str, Any] = {}

    def entry(terms: dict[str, float], fitted_on: list[str], plain: list[Result], held: list[float], by: str,
              spec: list[Result]) -> dict[str, Any]:
        return {"terms": terms, "fitted_on": fitted_on, "plain_fitted": stats([x.error for x in plain]),
                "plain_held_out": stats(held), "held_out_by": by, "speculative": stats([x.error for x in spec])}

    gpu = [x for x in kept if not x.row["sim"].get("profile")]
    fit = [x for x in gpu if x.row["metric"] in PLAIN and x.row.get("fit")]
    out["cuda-graphs"] = entry(theta, [x.row["id"] for x in gpu if x.row.get("fit")], fit,
                               [x.error for x in gpu if x.row["metric"] in PLAIN and not x.row.get("fit")],
                               "rows outside the declared fit set", [x for x in gpu if x.row["metric"] in SPECULATIVE])
    shared = {x.row["id"]: x.error for x in gpu}
    for r in releases:
        out[r.name] = entry(r.terms, r.fitted_on, r.plain, [x.loo_error for x in r.plain if x.loo_error is not None],
                            "leave-one-out within the release", [x for x in r.other if x.row["metric"] in SPECULATIVE])
        # the same plain rows under the one cuda-graphs profile: what the release's own fit changes
        out[r.name]["plain_under_cuda_graphs"] = stats([shared[x.row["id"]] for x in r.plain if x.row["id"] in shared])
    for name in dict.fromkeys(x.row["sim"]["profile"] for x in kept if x.row["sim"].get("profile")):
        own = [x for x in kept if x.row["sim"].get("profile") == name]
        plain = [x for x in own if x.row["metric"] in PLAIN]
        out[name] = entry(own[0].terms or {}, [x.row["id"] for x in own if x.row.get("fit")],
                          [x for x in plain if x.row.get("fit")], [x.error for x in plain if not x.row.get("fit")],
                          "rows outside its fit set", [x for x in own if x.row["metric"] in SPECULATIVE])
    return out
