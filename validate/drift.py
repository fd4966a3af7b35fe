"""A stored profile brought to the run's own pace: re-timed anchors between the decoding rounds.

`validate calibrate` measures the machine at one moment, in one process; `validate run
--hardware PROFILE` decodes at another, in another. On a machine shared with other jobs the speed
of memory and cores moves between the two (the x256 runs in tests/validate/data: a calibration
13 minutes later priced the same run 2.5 points higher on every policy), and two processes of
the same program can differ in where their 4.8 GB of weights sit. That drift moves every policy's
error by the same amount, one-signed, and it is what sent the README's two-process recipe past its
3% target while the same run calibrated on the spot met it. A second cause sits in the stored fit itself: `validate calibrate`
fits one line over every size it timed (1 to 33 tokens), while a run verifies 1 to its largest
budget + 1; where the machine's cost is not linear over that range (on a loaded 2-core VM, 67 ms
at one token, 133 at two, 248 at four, 768 at 32), the global line overprices one-token steps by
13% and underprices five-token ones by 15%, and that does not cancel.

So `validate run --hardware` refits the stored profile's own cases of the sizes it verifies
(those up to its largest budget + 1; all of them when fewer than three are), re-times a few anchor
cases of the on-the-spot design (`--retime-repeats` runs each, each after a draft step) spread
between its decoding rounds, in its own process, and scales that local fit by what it finds:

    f_verify = median over anchor cases of (measured median / the local fit's cost model)
    f_draft  = median of the anchor draft steps / the stored draft time

The local cases are refitted with their medians times f_verify (so bandwidth and compute are
divided by it and the overhead multiplied: least squares weighted by 1/t is scale-equivariant)
and the draft times times f_draft; the form and design of the stored profile are kept. The result
is RUN/profile.json, whose `calibration.drift` says: the given profile, the sizes kept, both
factors, the anchor runs. `--no-retime` prices with the given profile unchanged.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from ecosim.catalog.models import ModelShape
from validate.calibrate import CalibConfig, Fit, Samples, fit, predict, profile


def factors(samples: Samples, local: Fit, shape: ModelShape, draft_time_s: float) -> tuple[float, float]:
    """(f_verify, f_draft) of the anchor runs against the local fit (module docstring)."""
    n, u, c, y, _ = samples.cases()
    f_verify = float(np.median(y / predict(local, shape, n, u, c)))
    f_draft = float(np.median(samples.draft_seconds)) / draft_time_s if samples.draft_seconds and draft_time_s > 0 else 1.0
    return f_verify, f_draft


def stored_samples(doc: dict[str, Any], most: int | None, f_verify: float = 1.0, f_draft: float = 1.0) -> Samples:
    """The stored profile's cases of at most `most` tokens (all of them when fewer than three are, or
    `most` is None), one run each at its median, and its draft times, scaled."""
    cases = doc["calibration"]["cases"]
    local = [c for c in cases if most is None or c["tokens"] <= most]
    s = Samples()
    for i, case in enumerate(local if len(local) >= 3 else cases):
        s.case.append(i)
        s.kinds.append(case["kind"])
        s.tokens.append(int(case["tokens"]))
        s.unions.append([int(x) for x in case["union_per_layer"]])
        s.contexts.append(int(case["context"]))
        s.seconds.append(float(case["median_s"]) * f_verify)
    drafts = doc["calibration"].get("draft_seconds") or [doc["draft_time_s"]]
    s.draft_seconds = [float(x) * f_draft for x in drafts]
    return s


def retimed(doc: dict[str, Any], shape: ModelShape, anchors: Samples, most: int | None, given: str) -> dict[str, Any]:
    """The stored profile `doc`, refitted on its cases of at most `most` tokens and scaled to the
    anchors' pace (module docstring): a new profile document."""
    cal = doc["calibration"]
    overlap = cal["fit"]["overlap"]
    local = fit(stored_samples(doc, most), shape, overlap)
    f_verify, f_draft = factors(anchors, local, shape, float(doc["draft_time_s"]))
    known = {f.name for f in fields(CalibConfig)}
    design = {k: tuple(v) if isinstance(v, list) else v for k, v in (cal.get("design") or {}).items() if k in known}
    samples = stored_samples(doc, most, f_verify, f_draft)
    result = fit(samples, shape, overlap)
    drift = {"given": given, "most_tokens": most, "cases_kept": len(samples.seconds), "cases_stored": len(cal["cases"]),
             "verify_factor": f_verify, "draft_factor": f_draft, "anchor_cases": int(len(anchors.cases()[0])),
             "anchor_runs": len(anchors.seconds), "anchor_drafts": len(anchors.draft_seconds)}
    measured_link = (cal.get("environment") or {}).get("device_kind") == "cuda"  # a CPU's links follow its bandwidth
    info = {"name": doc["name"], "memory_bytes": doc.get("hbm_bytes", 0.0),
            "link_bw": doc.get("link_bw") if measured_link else None, "pcie_bw": doc.get("pcie_bw") if measured_link else None,
            "environment": cal.get("environment", {}), "unmeasured": cal.get("unmeasured", []),
            "source": f"{doc.get('source', '')}; refitted on up to {most} tokens and re-timed by validate run "
                      f"(verify x{f_verify:.4f}, draft x{f_draft:.4f})"}
    out = profile(result, CalibConfig(**design), samples, shape, info)
    out["calibration"]["drift"] = drift
    out["calibration"]["date"] = cal.get("date", out["calibration"]["date"])
    return out
