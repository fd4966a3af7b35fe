"""The profile JSON: the fitted Device's fields, then how it was measured (`calibration`).

`ecosim replay --hardware profile.json` reads the Device fields; the `calibration` object keeps
the design, the fit, every case's median and prediction, and the environment, so a reader can
judge the profile without rerunning it.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict
from typing import Any

from ecosim.catalog.models import ModelShape
from validate.calibrate.config import CalibConfig
from validate.calibrate.fit import Fit, device_of, predict
from validate.calibrate.timing import Samples


def profile(fit_: Fit, cfg: CalibConfig, samples: Samples, shape: ModelShape, info: dict[str, Any]) -> dict[str, Any]:
    """The profile JSON: Device fields, then `calibration` (design, fit, samples, environment)."""
    dev = device_of(fit_, info["name"], info["memory_bytes"], info.get("link_bw"), info.get("pcie_bw"), info["source"])
    n, u, c, y, runs = samples.cases()
    pred = predict(fit_, shape, n, u, c)
    return {
        **dev.to_dict(),
        "calibration": {
            "by": "validate calibrate",
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "model": shape.name,
            "expert_bytes": shape.expert_bytes,
            "dense_bytes": shape.dense_bytes,
            "environment": info.get("environment", {}),
            "design": asdict(cfg),
            "fit": fit_.to_dict(),
            "unmeasured": info.get("unmeasured", []),
            "cases": [
                {"kind": kd, "tokens": int(a), "union_per_layer": [int(x) for x in b], "context": int(cc), "runs": int(r),
                 "median_s": float(m), "predicted_s": float(p)}
                for kd, a, b, cc, r, m, p in zip(samples.case_kinds(), n, u, c, runs, y, pred)
            ],
            "draft_seconds": [float(x) for x in samples.draft_seconds],
        },
    }
