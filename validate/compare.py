"""The simulator against the measurement: comparison.json and comparison.parquet (in RUN, or `--out`).

Every figure, defined once (`validate report` prints these names):

Per policy, measured (RUN/steps.parquet, one row per real step; each phase the median over repeats):
- tokens: tokens produced over all requests (equal to the greedy reference's when lossless).
- steps: verification forwards.
- measured_time_per_token_s: sum over steps of (draft + select + verify seconds) / tokens.
- experts_per_step: mean over steps of the sum over MoE layers of the union of experts the verify
  forward routed to (the tracer's router hooks); `experts` in `steps` is that sum for one step.
- expert_bytes_per_token: sum over steps of experts x expert_bytes / tokens (routed-expert bytes read).
- bytes_per_token: expert bytes + dense bytes + KV bytes of (context + verified) tokens per step,
  summed, / tokens (what the cost model counts as read).
- draft_s / select_s / verify_s: mean seconds per step of each phase (decode.py defines them).
- simulated_draft_s / simulated_verify_s: what the cost model charges per step for the draft (the
  profile's draft time) and for the verify forward (mean over the measured steps); selection has
  no simulated counterpart.
- live_trees_in_trace (ecospec with the oracle predictor): steps whose live draft tree was found
  node for node in the recorded trace; peeks: steps where it was not, and the true experts came
  from an untimed forward of the live tree instead.
- measured_speedup_vs_ar: ar's measured time per token / this policy's.

Per policy, simulated (ecosim's CostModel: a CPU calibration read as a host, catalog/hosts.py, under the `cpu`
placement, the model that prices a llama.cpp or KTransformers host; any other profile as a Device under hbm):
- simulated_time_per_token_s: `TraceReplay(trace).run(policy, cost)` over the trace recorded on the
  spot: the simulator's prediction without looking at the measurement.
- simulated_steps, simulated_experts_per_step: the replay's steps and experts per step.
- error_pct: 100 x (simulated - measured) / measured time per token (signed).
- step_model_time_per_token_s: the cost model applied to each *measured* step (its measured union,
  verified tokens and context, plus draft time when speculative), summed, / tokens: the cost
  model's error alone, without the replay's trajectory; step_model_error_pct likewise.
- simulated_speedup_vs_ar: ar's simulated time per token / this policy's.

Across policies:
- mae_pct: mean of |error_pct|; worst_pct: max of |error_pct|.
- ranking_preserved: the policies in order of measured time per token are in the same order by
  simulated time per token.
- winner_margin: confidence's time per token / the winner's - 1, in percent, measured and simulated
  (positive: the winner is faster); margin_error_pp = simulated - measured, in percentage points.
- lossless: every policy's tokens, in every repeat, equal plain greedy decoding's.
- profile_drift: where the run re-timed a stored profile (validate/drift.py), the given profile and
  the factors it was scaled by (verify_factor, draft_factor: this run's times over the stored ones).
- draft_step: a draft step's cost, the one figure the docs quote: `measured_s`, the mean draft
  phase over every step of the speculative policies, and `profile_s`, the profile's draft time
  (what the simulator charges each speculative step); None without a speculative policy.

`steps` lists every measured step: policy, request, pos, experts (and union, per layer), tokens,
verified, bytes (expert + dense + KV bytes the cost model counts), the measured phases, measured_s
and simulated_s (the cost model on that step). The project's targets: mae_pct <= 3, worst_pct <= 8,
ranking preserved, the winner faster than confidence by the predicted margin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ecosim.catalog.devices import get_device
from ecosim.cost import NOT_MODELLED, CostConfig
from ecosim.errors import EcoSimError
from ecosim.catalog.hosts import from_calibration
from ecosim.placements import Hbm
from ecosim.placements.cpu import Cpu
from ecosim.predictors import get_predictor, reads_routing
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import read_trace
from ecosim.policies import registry
from validate.choice import RERANK, spec_dict, spec_from_dict

TARGETS = {"mae_pct": 3.0, "worst_pct": 8.0}
VALIDATE_NOT_MODELLED = (
    "selection time beyond the calibrated confidence selection (ecospec's greedy growth costs more)",
    "the draft's first forward grows with the tokens accepted the step before; the profile charges one median draft step",
    "cache effects across steps (experts reused by consecutive steps may still be in CPU caches)",
)


def _resolve(run_dir: Path, stored: str, fallback: str) -> Path:
    """A path measured.json names (relative ones are relative to the run directory), else the
    run directory's own copy (a run directory moved elsewhere keeps working)."""
    p = Path(stored)
    if not p.is_absolute():
        p = run_dir / p
    return p if p.exists() else run_dir / fallback


def load_run(run_dir: Path) -> tuple[dict[str, Any], pl.DataFrame]:
    m = run_dir / "measured.json"
    if not m.is_file():
        raise EcoSimError(f"{run_dir}: no measured.json (not a `validate run` directory)")
    try:
        measured = json.loads(m.read_text())
    except ValueError as e:
        raise EcoSimError(f"{m}: not JSON ({e})") from None
    if measured.get("schema") != "validate-measurement":
        raise EcoSimError(f"{m}: not a validate measurement")
    s = run_dir / "steps.parquet"
    if not s.is_file():
        raise EcoSimError(f"{run_dir}: no steps.parquet")
    return measured, pl.read_parquet(s)


def warnings(measured: dict[str, Any], profile_doc: dict[str, Any], trace: Any) -> list[str]:
    """What makes this comparison less than like for like, one line each."""
    out = []
    if measured.get("trace_matches_greedy") is False:
        out.append("the recorded trace's tokens differ from plain greedy decoding (the simulator replays other tokens)")
    if measured.get("deterministic") is False:
        out.append("repeats of a policy took different steps; step times are from the first repeat")
    td, rd = measured.get("trace_draft") or {}, measured.get("draft") or {}
    if td.get("name") and rd.get("name") and (td.get("name"), td.get("bytes")) != (rd.get("name"), rd.get("bytes")):
        out.append(f"the trace was recorded with draft {td.get('name')!r}, the run used {rd.get('name')!r}: live trees "
                   "differ from the recorded ones, and the replay is of other trees")
    cal = profile_doc.get("calibration", {})
    pe, me = cal.get("environment") or {}, measured.get("environment") or {}
    for key in ("device", "threads", "dtype", "clock"):
        if pe.get(key) is not None and me.get(key) is not None and pe[key] != me[key]:
            out.append(f"the profile was calibrated with {key} {pe[key]!r}, the run used {me[key]!r}")
    if cal.get("model") is not None and cal["model"] != measured.get("model"):
        out.append(f"the profile was calibrated on model {cal['model']!r}, the run used {measured.get('model')!r}")
    design, tree = cal.get("design") or {}, trace.manifest.get("tree", {})
    if design and any(design.get(k) != tree.get(k) for k in ("depth", "topk", "max_nodes")):
        out.append(f"the profile's draft time was measured with trees depth {design.get('depth')} topk {design.get('topk')} "
                   f"max_nodes {design.get('max_nodes')}; the trace's are {tree.get('depth')}/{tree.get('topk')}/{tree.get('max_nodes')}")
    for w in (cal.get("fit") or {}).get("warnings", []):
        out.append(f"calibration: {w}")
    if trace.synthetic:
        out.append(f"the trace is {trace.provenance}")
    return out


def _pct(sim: float, meas: float) -> float:
    return 100.0 * (sim - meas) / meas if meas else float("nan")


def _cost(trace: Any, device: Any, profile_doc: dict[str, Any]) -> Any:
    """A CPU calibration is a host priced by the `cpu` placement; any other profile a device under hbm."""
    env = (profile_doc.get("calibration") or {}).get("environment") or {}
    if env.get("device_kind") == "cpu" and "hbm_bw" in profile_doc:
        host = from_calibration(profile_doc, device.name)
        return cost_model(trace, device, Cpu(), CostConfig(host=host))
    return cost_model(trace, device, Hbm(), CostConfig())


def compare_run(run_dir: Path, hardware: str | None = None, out: Path | None = None) -> dict[str, Any]:
    """Build and write comparison.json and comparison.parquet (into `out`, default the run directory:
    a committed run can be compared without writing into it); return the document."""
    run_dir = Path(run_dir)
    out = run_dir if out is None else Path(out)
    measured, steps = load_run(run_dir)
    trace = read_trace(_resolve(run_dir, measured["trace"], "trace"))
    profile_path = Path(hardware) if hardware else _resolve(run_dir, measured["profile"], "profile.json")
    device = get_device(str(profile_path))
    try:
        profile_doc = json.loads(profile_path.read_text())
    except (OSError, ValueError):
        profile_doc = {}
    cost = _cost(trace, device, profile_doc)
    m = trace.model
    specs = [spec_from_dict(d) for d in measured["policies"]]
    predictors = {s.predictor: get_predictor(s.predictor) for s in specs if s.predictor is not None}
    replay = TraceReplay(trace, predictors=predictors)

    policies, step_rows = [], []
    for j, spec in enumerate(specs):
        st = steps.filter(pl.col("policy_index") == j).sort(["request", "pos"])
        if st.height == 0:
            raise EcoSimError(f"{run_dir}/steps.parquet: no steps of {spec.label()}")
        union = np.array(st["union"].to_list(), dtype=np.float64)
        verified = st["verified"].to_numpy().astype(np.int64)
        context = st["context"].to_numpy().astype(np.int64)
        sim_verify = cost.step_times(union, verified, context, speculative=False)
        sim_steps = sim_verify + cost.draft_time(spec.speculative)
        meas = st["measured_s"].to_numpy()
        tokens = int(st["tokens"].sum())
        experts = union.sum(axis=1)
        nbytes = experts * m.expert_bytes + m.dense_bytes + (context + verified) * m.kv_bytes_per_token
        row = replay.run(spec, cost)
        mt, stp = float(meas.sum()) / tokens, float(sim_steps.sum()) / tokens
        policies.append({
            **spec_dict(spec),
            "measured_time_per_token_s": mt, "simulated_time_per_token_s": row.time_per_token_s,
            "error_pct": _pct(row.time_per_token_s, mt),
            "step_model_time_per_token_s": stp, "step_model_error_pct": _pct(stp, mt),
            "tokens": tokens, "steps": st.height, "experts_per_step": float(experts.mean()),
            "simulated_tokens": row.tokens, "simulated_steps": row.steps, "simulated_experts_per_step": row.experts_per_step,
            "expert_bytes_per_token": float(experts.sum() * m.expert_bytes / tokens),
            "bytes_per_token": float(nbytes.sum() / tokens),
            "draft_s": float(st["draft_s"].mean()), "select_s": float(st["select_s"].mean()),
            "verify_s": float(st["verify_s"].mean()),
            "simulated_draft_s": float(cost.draft_time(spec.speculative)), "simulated_verify_s": float(sim_verify.mean()),
            "tokens_per_step": tokens / st.height,
            "live_trees_in_trace": int(st["tree_in_trace"].fill_null(False).sum()) if reads_routing(spec.predictor) else None,
            "peeks": int(st["peeked"].sum()),
        })
        for r, s_sim, b in zip(st.iter_rows(named=True), sim_steps, nbytes):
            step_rows.append({"policy": spec.label(), "request": r["request"], "pos": r["pos"], "experts": r["experts"],
                              "union": r["union"], "tokens": r["tokens"], "verified": r["verified"], "bytes": float(b),
                              "draft_s": r["draft_s"], "select_s": r["select_s"], "verify_s": r["verify_s"],
                              "measured_s": r["measured_s"], "simulated_s": float(s_sim)})

    ar = next((p for p in policies if p["policy"] == registry.baseline().name), None)
    for p in policies:
        p["measured_speedup_vs_ar"] = ar["measured_time_per_token_s"] / p["measured_time_per_token_s"] if ar else None
        p["simulated_speedup_vs_ar"] = ar["simulated_time_per_token_s"] / p["simulated_time_per_token_s"] if ar else None
    errs = np.array([abs(p["error_pct"]) for p in policies])
    by_meas = [p["label"] for p in sorted(policies, key=lambda p: p["measured_time_per_token_s"])]
    by_sim = [p["label"] for p in sorted(policies, key=lambda p: p["simulated_time_per_token_s"])]
    winner = policies[0]
    conf = next((p for p in policies[1:] if p["policy"] == RERANK), None)
    margin = None
    if conf is not None and winner["label"] != conf["label"]:
        mm = 100.0 * (conf["measured_time_per_token_s"] / winner["measured_time_per_token_s"] - 1.0)
        sm = 100.0 * (conf["simulated_time_per_token_s"] / winner["simulated_time_per_token_s"] - 1.0)
        margin = {"winner": winner["label"], "versus": conf["label"], "measured_pct": mm, "simulated_pct": sm,
                  "margin_error_pp": sm - mm, "winner_faster_measured": mm > 0, "winner_faster_simulated": sm > 0}
    mae, worst = float(errs.mean()), float(errs.max())
    spec = [p for p in policies if p["simulated_draft_s"] > 0]
    draft_step = None if not spec else {
        "measured_s": sum(p["draft_s"] * p["steps"] for p in spec) / sum(p["steps"] for p in spec),
        "profile_s": spec[0]["simulated_draft_s"]}
    doc = {
        "schema": "validate-comparison", "version": 1,
        "lossless": bool(measured["lossless"]),
        "lossless_failures": measured.get("lossless_failures", []),
        "trace_matches_greedy": measured.get("trace_matches_greedy"),
        "deterministic": measured.get("deterministic"),
        "policies": policies,
        "mae_pct": mae, "worst_pct": worst,
        "ranking_preserved": by_meas == by_sim, "ranking_measured": by_meas, "ranking_simulated": by_sim,
        "winner_margin": margin,
        "draft_step": draft_step,
        "targets": {
            "mae_pct": {"target": TARGETS["mae_pct"], "value": mae, "met": mae <= TARGETS["mae_pct"]},
            "worst_pct": {"target": TARGETS["worst_pct"], "value": worst, "met": worst <= TARGETS["worst_pct"]},
            "ranking_preserved": {"met": by_meas == by_sim},
            "winner_faster_than_confidence": None if margin is None else {"met": margin["winner_faster_measured"]},
        },
        "device": device.name, "hardware": {**device.to_dict(), "profile": str(profile_path)},
        "profile_environment": profile_doc.get("calibration", {}).get("environment"),
        "profile_drift": profile_doc.get("calibration", {}).get("drift"),
        "measured_environment": measured.get("environment"),
        "model": measured["model"], "model_ref": measured.get("model_ref"), "draft": measured.get("draft"),
        "trace": str(trace.path), "trace_synthetic": trace.synthetic, "repeats": measured.get("repeats"),
        "choice": measured.get("choice"),
        "not_modelled": list(NOT_MODELLED) + list(VALIDATE_NOT_MODELLED),
        "warnings": warnings(measured, profile_doc, trace),
        "steps": step_rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps(doc, indent=1) + "\n")
    flat = [{k: v for k, v in p.items()} | {"device": device.name, "model": measured["model"], "lossless": doc["lossless"]}
            for p in policies]
    pl.DataFrame(flat).write_parquet(out / "comparison.parquet")
    return doc
