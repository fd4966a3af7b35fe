"""The winner of a sweep: per hardware, bandwidth and placement, the best policy configuration.

Candidates are the configurations of the policies the sweep was asked for (`--policy`) and always
the baseline, plain decoding (Cascade's point: speculation off is a choice, so a winner slower than
plain decoding is never recommended: `ar` wins instead), never the
bound (`oracle`, not a policy), and only those with a row for every trace of the sweep. A
candidate is judged on its total over the traces (time and tokens summed, ratios recomputed from
the sums, as `metrics.total` does):

- `time_per_token` (default): the smallest total time / total tokens;
- `speedup_vs_ar`: the largest total-ar time per token / total time per token.

`--min-tokens-per-step X` drops candidates whose total tokens / total steps is below X. Exact ties
go to the first candidate in grid order (policy, then its knobs: budget, lambda, predictor, score, ...).

winner.json (schema "ecosim-winner", version 1), the file `validate` reads:

    {
      "schema": "ecosim-winner",
      "version": 1,
      "objective": "time_per_token" | "speedup_vs_ar",
      "constraints": {"min_tokens_per_step": float | null},
      "traces": [                       # what the winner was chosen on, in sweep order
        {"path": str,                   # resolved path of the trace directory
         "name": str,                   # its directory name (the `trace` column)
         "fingerprint": str,            # sha256 of its files, first 32 hex digits (results.py)
         "provenance": str,             # real, hybrid or synthetic (older sweeps: from `synthetic`)
         "synthetic": bool}             # provenance is not real
      ],
      "versions": {"ecosim": str, "numpy": str, "python": str},
      "cost": {...},                    # cost.CostConfig of the sweep (mode, efficiencies, overheads)
      "winners": [                      # one per (hardware, hbm_bw, placement), in grid order
        {
          "hardware": str,              # as given to --hardware (catalogue name or profile file)
          "hbm_bw": float,              # bytes/s the device was priced at (after --bw)
          "placement": str,             # canonical: hbm, ep:N, offload:CAP:lru|lfu
          "device": {...},              # catalog.devices.Device.to_dict() exactly as priced
          "candidates": int,            # configurations compared (after the constraint)
          "config": null | {            # null when no candidate meets the constraint
            "policy": str, "budget": int | null, "lambda": float | null,
            "predictor": str | null, "score": str | null,   # every registered knob's column
            "draft_steps": int | null,  # the setting's draft steps (null: the traces' recorded depth)

            "config_ids": [str]         # its results.parquet config_id per trace, in trace order
          },
          "predicted": null | {         # the winner's totals over the traces (metrics.py defines each)
            "tokens": int, "steps": int, "time_s": float, "time_per_token_s": float,
            "tokens_per_step": float, "experts_per_step": float, "expert_bytes_per_token": float,
            "pcie_bytes_per_token": float, "speedup_vs_ar": float, "oracle_fraction": float
          },
          "per_trace": [ {"trace": str, "path": str, "fingerprint": str, "provenance": str,
                          <the same figures, that trace alone>} ]
        }
      ]
    }
"""

from __future__ import annotations

import platform
from typing import Any

import numpy as np
import polars as pl

from ecosim.errors import EcoSimError
from ecosim.metrics import Row, total
from ecosim.policies import registry
from ecosim.sweep.results import kind_of, row_of
from ecosim.version import __version__

SCHEMA, VERSION = "ecosim-winner", 1
OBJECTIVES = ("time_per_token", "speedup_vs_ar")
PRICING = ["hardware", "hbm_bw", "placement"]


STEPS = "draft_steps"  # the setting's draft steps (null: the traces' recorded depth)


def knob_columns() -> list[str]:
    """A configuration's columns besides its pricing: the policy, every knob, and its draft steps."""
    return ["policy", *(k.key for k in registry.knobs()), STEPS]


FIGURES = ("tokens", "steps", "time_s", "time_per_token_s", "tokens_per_step", "experts_per_step",
           "expert_bytes_per_token", "pcie_bytes_per_token", "tokens_per_s", "speedup_vs_ar", "oracle_fraction")


def versions() -> dict[str, str]:
    return {"ecosim": __version__, "numpy": np.__version__, "python": platform.python_version()}


def figures(row: Row) -> dict[str, Any]:
    d = row.to_dict()
    return {k: d[k] for k in FIGURES}


def totals(df: pl.DataFrame, traces: list[str]) -> list[dict[str, Any]]:
    """Per (pricing, configuration) with a row for every trace: totals and the per-trace rows, in
    grid order. Each item: pricing keys, knobs, `total` (a compared Row), `rows`, `config_ids`."""
    recs = df.to_dicts()
    knobs = knob_columns()
    ar, oracle = registry.references()
    base: dict[tuple[Any, ...], dict[str, list[Row | None]]] = {}
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    pos = {t: i for i, t in enumerate(traces)}
    for r in recs:
        if r["trace_path"] not in pos:
            continue
        pk = tuple(r[k] for k in PRICING) + (r.get(STEPS),)  # ar and the oracle of the same draft steps
        key = pk + tuple(r.get(k) for k in knobs)
        g = groups.setdefault(key, {**{k: r.get(k) for k in PRICING + knobs}, "rows": [None] * len(traces),
                                    "ids": [None] * len(traces), "recs": [None] * len(traces)})
        i = pos[r["trace_path"]]
        g["rows"][i], g["ids"][i], g["recs"][i] = row_of(r), r["config_id"], r
        if r["policy"] in (ar, oracle):
            base.setdefault(pk, {ar: [None] * len(traces), oracle: [None] * len(traces)})[r["policy"]][i] = row_of(r)
    out = []
    for key, g in groups.items():
        if any(x is None for x in g["rows"]):
            continue
        b = base.get(key[: len(PRICING) + 1])
        if b is None or any(x is None for x in b[ar] + b[oracle]):
            continue
        g["total"] = total(g["rows"]).compare(total(b[ar]), total(b[oracle]))
        out.append(g)
    return out


def choose(df: pl.DataFrame, meta: dict[str, Any], objective: str = "time_per_token",
           min_tokens_per_step: float | None = None) -> dict[str, Any]:
    """winner.json's document for the results of a sweep (see the module docstring)."""
    if objective not in OBJECTIVES:
        raise EcoSimError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if min_tokens_per_step is not None and not (min_tokens_per_step >= 0 and np.isfinite(min_tokens_per_step)):
        raise EcoSimError(f"--min-tokens-per-step must be a finite number >= 0, got {min_tokens_per_step}")
    traces = [{**t, "provenance": kind_of(t)} for t in meta["traces"]]
    paths = [t["path"] for t in traces]
    allowed = (set(meta["grid"]["policies"]) | {registry.baseline().name}) - {registry.bound().name}
    devices = {(d["hardware"], d["hbm_bw"], d["placement"]): d["device"] for d in meta["pricings"]}
    winners: list[dict[str, Any]] = []
    by_pricing: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for g in totals(df, paths):
        by_pricing.setdefault(tuple(g[k] for k in PRICING), []).append(g)
    for pk, groups in by_pricing.items():
        cands = [g for g in groups if g["policy"] in allowed]
        if min_tokens_per_step is not None:
            cands = [g for g in cands if g["total"].tokens_per_step >= min_tokens_per_step]
        best = None
        for g in cands:  # first in grid order wins exact ties
            if best is None or _better(g["total"], best["total"], objective):
                best = g
        entry: dict[str, Any] = {
            "hardware": pk[0], "hbm_bw": pk[1], "placement": pk[2], "device": devices.get(pk),
            "candidates": len(cands), "config": None, "predicted": None, "per_trace": [],
        }
        if best is not None:
            entry["config"] = {**{k: best[k] for k in knob_columns()}, "config_ids": best["ids"]}
            entry["predicted"] = figures(best["total"])
            entry["per_trace"] = [{"trace": r["trace"], "path": r["trace_path"], "fingerprint": r["trace_fingerprint"],
                                   "provenance": kind_of(r), **{k: r[k] for k in FIGURES}}
                                  for r in best["recs"]]
        winners.append(entry)
    return {
        "schema": SCHEMA, "version": VERSION, "objective": objective,
        "constraints": {"min_tokens_per_step": min_tokens_per_step},
        "traces": traces, "versions": versions(), "cost": meta["grid"]["cost"], "winners": winners,
    }


def objective_value(row: Row, objective: str) -> float:
    """The number the objective minimises (speedup is negated)."""
    return row.time_per_token_s if objective == "time_per_token" else -(row.speedup_vs_ar or 0.0)


def _better(a: Row, b: Row, objective: str) -> bool:
    return objective_value(a, objective) < objective_value(b, objective)


def check_winner(doc: Any) -> dict[str, Any]:
    """The document if it is a winner.json this version understands; EcoSimError otherwise."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise EcoSimError(f"not a winner file (schema is not {SCHEMA!r})")
    if doc.get("version") != VERSION:
        raise EcoSimError(f"winner file version {doc.get('version')!r}; this ecosim reads version {VERSION}")
    for key in ("objective", "constraints", "traces", "versions", "cost", "winners"):
        if key not in doc:
            raise EcoSimError(f"winner file: missing {key!r}")
    return doc
