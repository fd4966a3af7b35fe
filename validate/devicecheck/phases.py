"""Phases 3-5 of the device check on one built target, each a function returning its figures.

3. record: `tracer record` (run_record) of the prompts on the device, `ecosim check`'s checks of
   the trace (check_trace), and a sample of nodes recomputed by plain decoding: each node's
   seq(node) (docs/TRACE_FORMAT.md) run through the target with its own causal mask and no cache;
   the argmax must equal the node's `target_next`, the routing of its last token the node's
   `experts` (as sets per layer), and the log-prob of the node's token its `target_logprob`.
4. calibrate: `validate calibrate`'s own code (calibrate_pair) on subtrees of that trace, then the
   step-time table of graphs.py (eager and CUDA-graph step time against tokens and experts).
5. run: `validate run`'s own code (run_validation) on that trace with that profile, the policies
   `ecospec-auto` (the oracle predictor and raw values: what it can select with live), `ar` and
   `confidence`, resumable into RUN.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from validate.devicecheck.plan import Plan

SMALL_TREE = dict(depth=3, topk=3, max_nodes=10)  # --small: small trees keep a CPU run short


def prompts_file(repo_prompts: Path, out: Path, count: int) -> Path:
    """The first `count` prompts, one per task file of prompts/ in turn, as one JSON Lines file."""
    files = sorted(repo_prompts.glob("*.jsonl"))
    rows = [[json.loads(line) for line in f.read_text().splitlines() if line.strip()] for f in files]
    picked = [r[i] for i in range(max(len(r) for r in rows)) for r in rows if i < len(r)][:count]
    out.write_text("".join(json.dumps(p) + "\n" for p in picked))
    return out


def record_phase(model_dir: Path, prompts: Path, out: Path, plan: Plan, device: str, dtype: str,
                 threads: int | None) -> dict[str, Any]:
    """Record the trace; check it against the format."""
    from ecosim.trace.io import check_trace
    from tracer.record import RecordConfig, run_record

    run_record(RecordConfig(model=str(model_dir), prompts=[prompts], out=out, max_new_tokens=plan.tokens,
                            max_prompts=None, device=device, dtype=dtype, threads=threads, progress=False, force=True,
                            command="validate device-check", **plan.tree))
    m = check_trace(out)
    return {"trace": str(out), "requests": len(m["requests"]), "positions": int(sum(r["positions"] for r in m["requests"])),
            "check": "ok", "model": m["model"]}


def recompute_phase(pair: Any, trace_path: Path, sample: int, seed: int) -> dict[str, Any]:
    """Recompute `sample` nodes of the trace by plain decoding (module docstring); the agreement."""
    import torch

    from ecosim.trace.io import read_trace
    from validate.recorded import prompt_ids, trace_tokens

    trace = read_trace(trace_path)
    nodes = trace.nodes
    prompts, roots = prompt_ids(trace, trace_path), trace_tokens(trace)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(nodes["node"]), size=min(sample, len(nodes["node"])), replace=False))
    tree_first = {}  # (request, pos) -> first row of its tree
    for i, (r, p, n) in enumerate(zip(nodes["request_id"], nodes["pos"], nodes["node"])):
        if n == 0:
            tree_first[(int(r), int(p))] = i
    layers, k = trace.model.num_moe_layers, trace.model.top_k
    model, capture = pair.target.model, pair.capture
    dev = model.get_input_embeddings().weight.device
    agree_next = agree_route = 0
    lp_diff = 0.0
    for row in rows:
        rid, pos, node = int(nodes["request_id"][row]), int(nodes["pos"][row]), int(nodes["node"][row])
        first = tree_first[(rid, pos)]
        path, x = [], node
        while x > 0:
            path.append(int(nodes["token"][first + x]))
            x = int(nodes["parent"][first + x])
        seq = prompts[rid] + roots[rid][: pos + 1] + path[::-1]
        with torch.inference_mode(), capture.capture():
            logits = model(input_ids=torch.tensor([seq], device=dev), use_cache=False).logits[0].float()
        experts, _ = capture.collect()
        agree_next += int(logits[-1].argmax()) == int(nodes["target_next"][row])
        want = np.sort(nodes["experts"][row].reshape(layers, k), axis=-1)
        agree_route += bool(np.array_equal(np.sort(experts[-1].astype(np.int64), axis=-1), want))
        if node > 0:
            lp = float(torch.log_softmax(logits[-2], -1)[int(nodes["token"][row])])
            lp_diff = max(lp_diff, abs(lp - float(nodes["target_logprob"][row])))
    n = len(rows)
    return {"nodes": n, "target_next_equal": agree_next, "experts_equal": agree_route, "max_logprob_diff": lp_diff,
            "passed": agree_next == n}


def calibrate_phase(pair: Any, trace_path: Path, out: Path, plan: Plan, clock_kind: str) -> dict[str, Any]:
    """`validate calibrate` on the trace (profile at `out`), then the eager / CUDA-graph step table."""
    from ecosim.trace.io import read_trace
    from validate.calibrate import CalibConfig
    from validate.calibrate.design import grid_design
    from validate.calibrate.pair import bench_for, calibrate_pair
    from validate.clock import make_clock
    from validate.devicecheck.graphs import step_table
    from validate.recorded import trace_text

    trace = read_trace(trace_path)
    ctx = trace.positions["context_len"]
    cfg = CalibConfig(tokens=plan.calib_tokens, levels=2, contexts=tuple(sorted({int(ctx.min()), int(ctx.max())})),
                      repeats=plan.calib_repeats, warmup=1, overlap="max" if pair.target.device.type == "cuda" else "sum",
                      budget=plan.budget, **plan.tree)
    clock = make_clock(clock_kind, pair.target.device)
    doc = calibrate_pair(pair, cfg, clock, clock_kind, trace=trace)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    grid = grid_design(CalibConfig(tokens=plan.table_tokens, levels=2), pair.shape, np.random.default_rng(plan.seed))
    bench = bench_for(pair, cfg, trace_text(trace))
    try:
        table, notes = step_table(bench, clock, grid, int(ctx.max()), plan.calib_repeats, pair.target.device.type == "cuda")
    finally:
        bench.close()
    f = doc["calibration"]["fit"]
    return {"profile": str(out), "fit": f, "cases": len(doc["calibration"]["cases"]), "steps": table, "graph_notes": notes}


def run_phase(model_dir: Path, trace_path: Path, profile: Path, out: Path, plan: Plan, device: str, dtype: str,
              threads: int | None, clock_kind: str) -> dict[str, Any]:
    """`validate run` on the trace with the profile: lossless check, measured against simulated per policy."""
    from validate.calibrate import CalibConfig
    from validate.choice import from_flags
    from validate.measure import RunConfig, run_validation

    # the self-tuning policy, as validate run can select with it live (oracle predictor, raw values),
    # then ar and confidence
    choice = from_flags("ecospec-auto", {"predictor": "oracle", "value": "raw"})
    cfg = RunConfig(model=str(model_dir), out=out, choice=choice, device=device, dtype=dtype, threads=threads,
                    repeats=plan.repeats, clock=clock_kind, hardware=profile, trace=trace_path, calib=CalibConfig(),
                    progress=False, command="validate device-check", force=True, **plan.tree)
    doc = run_validation(cfg, lambda msg: None)
    return {"run": str(out), "lossless": doc["lossless"], "mae_pct": doc["mae_pct"], "worst_pct": doc["worst_pct"],
            "ranking_preserved": doc["ranking_preserved"], "trace_matches_greedy": doc["trace_matches_greedy"],
            "policies": [{"label": p["label"], "measured_ms_per_token": p["measured_time_per_token_s"] * 1e3,
                          "simulated_ms_per_token": p["simulated_time_per_token_s"] * 1e3, "error_pct": p["error_pct"],
                          "tokens_per_step": p["tokens_per_step"], "draft_ms": p["draft_s"] * 1e3,
                          "verify_ms": p["verify_s"] * 1e3} for p in doc["policies"]],
            "warnings": doc["warnings"]}
