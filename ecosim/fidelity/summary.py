"""The errors of `run`'s results summarised per group of metric (`ecosim fidelity`'s summary lines)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim.fidelity.fit import Result
from ecosim.fidelity.rows import PLAIN


def summary(results: list[Result]) -> dict[str, Any]:
    """Per group of metric: count, median and worst absolute error, within 15% / 30% (plain on
    held-out rows and on all rows; leave-one-out over the plain rows), sign right for speedups.
    Rows marked `separate` are left out of every group and listed under "separate" with their errors."""
    def stats(errs: list[float]) -> dict[str, Any]:
        a = np.abs(np.array(errs))
        if not len(a):
            return {"rows": 0}
        return {"rows": int(len(a)), "median_abs_error": float(np.median(a)), "worst_abs_error": float(a.max()),
                "within_15pct": int((a <= 0.15).sum()), "within_30pct": int((a <= 0.30).sum()),
                "within_10pct": int((a <= 0.10).sum())}

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

