"""A stored profile brought to the run's own pace: re-timed anchors between the decoding rounds.

`validate calibrate` measures the machine at one moment, in one process; `validate run
--hardware PROFILE` decodes at another, in another. On a machine shared with other jobs the speed
of memory and cores moves between the two (the x256 runs in tests/validate/data: a calibration
13 minutes later priced the same run 2.5 points higher on every policy), and two processes of
the same program can differ in where their 4.8 GB of weights sit. That drift moves every policy's
error by the same amount, one-signed, and it is what sent the README's two-process recipe past its
3% target while the same run calibrated on the spot met it. So `validate run --hardware`
re-times a few anchor cases of the on-the-spot design (subtrees of the trace of 1 to the largest
budget + 1 tokens, `--retime-repeats` runs each, each after a draft step) spread between its
decoding rounds, in its own process, and scales the profile by what it finds:

    f_verify = median over anchor cases of (measured median / the profile's cost model)
    f_draft  = median of the anchor draft steps / the profile's draft time

The profile's own cases are refitted with their medians times f_verify (so bandwidth and compute
are divided by it and the overhead multiplied: least squares weighted by 1/t is scale-equivariant)
and its draft times times f_draft; the form, design and cases of the stored profile are kept. The
result is RUN/profile.json, whose `calibration.drift` says: the given profile, both factors, the
anchor runs. `--no-retime` prices with the given profile unchanged.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from ecosim.catalog.models import ModelShape
from ecosim.cost import CostModel
from validate.calibrate import CalibConfig, Samples, fit, profile


def factors(samples: Samples, cost: CostModel, draft_time_s: float) -> tuple[float, float]:
    """(f_verify, f_draft) of the anchor runs against the stored profile (module docstring)."""
    n, u, c, y, _ = samples.cases()
    pred = cost.step_times(u.astype(np.float64), n, c, speculative=False)
    f_verify = float(np.median(y / pred))
    f_draft = float(np.median(samples.draft_seconds)) / draft_time_s if samples.draft_seconds and draft_time_s > 0 else 1.0
    return f_verify, f_draft


def stored_samples(doc: dict[str, Any], f_verify: float, f_draft: float) -> Samples:
    """The stored profile's cases (one run each, at its median) and draft times, scaled."""
    s = Samples()
    for i, case in enumerate(doc["calibration"]["cases"]):
        s.case.append(i)
        s.kinds.append(case["kind"])
        s.tokens.append(int(case["tokens"]))
        s.unions.append([int(x) for x in case["union_per_layer"]])
        s.contexts.append(int(case["context"]))
        s.seconds.append(float(case["median_s"]) * f_verify)
    drafts = doc["calibration"].get("draft_seconds") or [doc["draft_time_s"]]
    s.draft_seconds = [float(x) * f_draft for x in drafts]
    return s


def retimed(doc: dict[str, Any], shape: ModelShape, anchors: Samples, cost: CostModel, given: str) -> dict[str, Any]:
    """The stored profile `doc` scaled to the anchors' pace (module docstring): a new profile document."""
    f_verify, f_draft = factors(anchors, cost, float(doc["draft_time_s"]))
    cal = doc["calibration"]
    known = {f.name for f in fields(CalibConfig)}
    design = {k: tuple(v) if isinstance(v, list) else v for k, v in (cal.get("design") or {}).items() if k in known}
    samples = stored_samples(doc, f_verify, f_draft)
    result = fit(samples, shape, cal["fit"]["overlap"])
    drift = {"given": given, "verify_factor": f_verify, "draft_factor": f_draft,
             "anchor_cases": int(len(anchors.cases()[0])), "anchor_runs": len(anchors.seconds),
             "anchor_drafts": len(anchors.draft_seconds)}
    measured_link = (cal.get("environment") or {}).get("device_kind") == "cuda"  # a CPU's links follow its bandwidth
    info = {"name": doc["name"], "memory_bytes": doc.get("hbm_bytes", 0.0),
            "link_bw": doc.get("link_bw") if measured_link else None, "pcie_bw": doc.get("pcie_bw") if measured_link else None, "environment": cal.get("environment", {}), "unmeasured": cal.get("unmeasured", []),
            "source": f"{doc.get('source', '')}; re-timed by validate run (verify x{f_verify:.4f}, draft x{f_draft:.4f})"}
    out = profile(result, CalibConfig(**design), samples, shape, info)
    out["calibration"]["drift"] = drift
    out["calibration"]["date"] = cal.get("date", out["calibration"]["date"])
    return out
