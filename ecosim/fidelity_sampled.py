"""Published rows measured while sampling: each row's `temperature`, and how the predicted ones at T > 0 fare.

A row of catalog/data/published.json may say at which temperature its source decoded (`temperature`, a number
>= 0); a row without one counts as greedy (T = 0), as most sources benchmark, and rows whose source does not state
it are read so (their notes say where). The step model does not price temperature itself: a speculative row at
T > 0 is matched by its published accept length, as a greedy one is, because sampling changes what is accepted,
not what a step costs (ecosim/sampling.py). Reporting the sampled rows apart shows whether that holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError


def temperature(row: dict[str, Any]) -> float:
    """The row's sampling temperature; 0 (greedy) when it gives none."""
    return float(row.get("temperature", 0.0))


def check_temperatures(rows: list[dict[str, Any]], path: Path) -> None:
    """One line naming the table and the row when a temperature is not a number >= 0."""
    for r in rows:
        t = r.get("temperature", 0.0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 100.0:
            raise EcoSimError(f"{path}: row {r.get('id')!r}: temperature must be a number in [0, 100] (0: greedy)")


def sampled_summary(results: list[Any]) -> dict[str, Any]:
    """The predicted rows at T > 0 (not `separate`): count, median and worst |error|, and each row's error.
    `results` are ecosim.fidelity's Result objects (row, error)."""
    hot = [x for x in results if temperature(x.row) > 0 and not x.row.get("separate")]
    if not hot:
        return {"rows": 0}
    a = np.abs(np.array([x.error for x in hot]))
    return {"rows": len(hot), "median_abs_error": float(np.median(a)), "worst_abs_error": float(a.max()),
            "temperatures": sorted({temperature(x.row) for x in hot}),
            "each": [{"id": x.row["id"], "temperature": temperature(x.row), "metric": x.row["metric"], "error": x.error}
                     for x in hot]}


def sampled_line(s: dict[str, Any], not_predicted: list[dict[str, Any]]) -> str | None:
    """The summary line for the sampled rows (None when the table has none)."""
    skipped = [r for r in not_predicted if temperature(r) > 0]
    if not s["rows"] and not skipped:
        return None
    line = "sampled (T > 0): "
    if s["rows"]:
        ts = ", ".join(f"{t:g}" for t in s["temperatures"])
        line += (f"{s['rows']} rows at T = {ts}, median |error| {s['median_abs_error']:.1%}, worst "
                 f"{s['worst_abs_error']:.1%} (" + ", ".join(f"{x['id']} {x['error']:+.1%}" for x in s["each"]) + ")")
    else:
        line += "no row predicted"
    if skipped:
        line += f"; {len(skipped)} not predicted (" + ", ".join(f"{r['id']} at T = {temperature(r):g}" for r in skipped) + ")"
    return line
