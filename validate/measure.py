"""`validate run` and `validate calibrate`, the measuring half: everything that needs the models.

run:
1. record a trace of the prompts on the spot with tracer's recorder (RUN/trace; the simulator's
   input), or take `--trace` (its prompts, tree options and token count are then used);
2. load the pair; take `--hardware PROFILE`, or calibrate on the spot (RUN/profile.json) on
   subtrees of the trace's trees of the sizes the policies verify (1 to the largest budget + 1:
   the fit is then local to the steps it must price), the calibration runs spread between the
   decoding rounds of 4 (so that calibration and measurement meet the same load from other
   processes);
3. decode every prompt greedily, plainly (`decode.greedy`): the reference;
4. decode every prompt with each policy (the winner, `ar`, `confidence`), `repeats` times,
   interleaved (repeat -> request -> policy) so that load from other processes falls on all
   policies alike; each step's phases are the median over the repeats;
5. check losslessness: each policy's tokens, in every repeat, against the reference (the first
   diverging position is reported); the recorded trace's tokens too;
6. write RUN/measured.json and RUN/steps.parquet, then compare (compare.py).
"""

from __future__ import annotations

import gc
import json
import platform
import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from ecosim.errors import EcoSimError
from ecosim.outputs import RUN_MARKER, VALIDATE_RUN, check_output
from ecosim.predictors import KINDS
from ecosim.predictors import check_name as check_predictor_name
from ecosim.predictors.kfold import check_requests
from ecosim.trace.io import Trace, read_manifest, read_trace
from ecosim.trace.schema import MANIFEST
from ecosim.tree_config import TREE
from tracer.loading import check_device, resolve
from tracer.pair import Pair, load_pair
from tracer.prompts import read_prompts
from validate.bench import ModelBench
from validate.calibrate import (
    Calibration, Case, CalibConfig, Samples, cpu_name, fit, grid_design, measure, memory_bytes, profile, trace_design,
)
from validate.choice import Choice, spec_dict
from validate.clock import Clock, WallClock, make_clock
from validate.decode import Decoded, SpecDecoder, Step, greedy
from validate.live import Selector

SCHEMA, VERSION = "validate-measurement", 1


# ------------------------------------------------------------------------------------------ loading


def check_one_device(device: str) -> None:
    """validate times one device (cpu, cuda or cuda:N; not `auto`, which spreads a model over GPUs),
    and it must be on this machine."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise EcoSimError(f"--device {device}: expected cpu, cuda or cuda:N (validate measures one device)")
    check_device(device)


# ------------------------------------------------------------------------------------- calibration


def environment(pair: Pair, clock: str) -> dict[str, Any]:
    import transformers

    dev = pair.target.device
    return {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name(),
        "device_kind": dev.type, "threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "python": platform.python_version(),
        "dtype": str(pair.target.dtype).removeprefix("torch."),
        "experts_implementation": getattr(pair.target.model.config, "_experts_implementation", None),
        "clock": clock,
    }


def _pcie_bw(dev: torch.device) -> float | None:
    """Host -> device copy bandwidth of a pinned 256 MiB buffer (CUDA only)."""
    if dev.type != "cuda":
        return None
    src = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    dst = torch.empty_like(src, device=dev)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(dev)
    clock = WallClock(dev)
    t0 = clock.now()
    for _ in range(5):
        dst.copy_(src, non_blocking=True)
    return 5 * src.numel() / (clock.now() - t0)


def design_for(cfg: CalibConfig, pair: Pair, trace: Trace | None) -> list[Case]:
    """The verify cases: subtrees of the trace's trees when there is a trace, else the grid."""
    rng = np.random.default_rng(cfg.seed)
    return trace_design(trace, cfg, rng) if trace is not None else grid_design(cfg, pair.shape, rng)


def trace_text(trace: Trace) -> list[int]:
    """The trace's prompts and continuations as one token stream."""
    roots = trace_tokens(trace)
    return [t for r in trace.manifest["requests"] for t in list(r.get("prompt_ids") or []) + roots[int(r["request_id"])]]


def calibrate_pair(pair: Pair, cfg: CalibConfig, clock: Clock, clock_kind: str = "wall", progress: Any = None,
                   text: list[int] | None = None, trace: Trace | None = None) -> dict[str, Any]:
    """Measure and fit `pair` on its device; the profile's JSON object. `trace`: verify cases are
    subtrees of its trees with their routing (calibrate.trace_design), else a grid; `text`: a token
    stream the contexts and draft roots are cut from (default: the trace's, else random tokens)."""
    if text is None and trace is not None:
        text = trace_text(trace)
    bench = ModelBench(pair, cfg.depth, cfg.topk, cfg.max_nodes, cfg.budget, cfg.seed, text)
    try:
        samples = measure(bench, clock, cfg, design_for(cfg, pair, trace), progress)
    finally:
        bench.close()
    return profile_of(pair, cfg, samples, clock_kind)


def profile_of(pair: Pair, cfg: CalibConfig, samples: Samples, clock_kind: str) -> dict[str, Any]:
    """Fit `samples` and describe the device: the profile's JSON object."""
    result = fit(samples, pair.shape, cfg.overlap)
    env = environment(pair, clock_kind)
    dev = pair.target.device
    if dev.type == "cuda":
        mem = float(torch.cuda.get_device_properties(dev).total_memory)
        pcie = _pcie_bw(dev)
        unmeasured = ["link_bw (one device: set to the host-to-device bandwidth)"]
        name = f"calibrated-cuda ({env['device']})"
    else:
        mem, pcie = memory_bytes(), None
        unmeasured = ["link_bw and pcie_bw (a CPU has neither: set to the fitted bandwidth)"]
        name = f"calibrated-cpu ({env['threads']} thread{'s' if env['threads'] != 1 else ''})"
    source = (f"validate calibrate on {env['device']}, {env['threads']} torch threads, {clock_kind} clock, model "
              f"{pair.shape.name} ({env['dtype']}); fitted, not a data sheet")
    info = {"name": name, "memory_bytes": mem, "link_bw": pcie, "pcie_bw": pcie, "source": source,
            "environment": env, "unmeasured": unmeasured}
    return profile(result, cfg, samples, pair.shape, info)


# ----------------------------------------------------------------------------------------- the run


@dataclass
class RunConfig:
    """Everything `validate run` takes."""

    model: str
    out: Path
    choice: Choice
    prompts: list[Path] = field(default_factory=list)
    draft: str = "default"
    device: str = "cpu"
    dtype: str = "auto"
    attn: str = "auto"
    threads: int | None = 1
    max_new_tokens: int = 48
    max_prompts: int | None = None
    depth: int = TREE.depth
    topk: int = TREE.topk
    max_nodes: int = TREE.max_nodes
    repeats: int = 3
    clock: str = "wall"
    hardware: Path | None = None
    trace: Path | None = None
    calib: CalibConfig = field(default_factory=CalibConfig)
    progress: bool = True
    command: str = ""
    contexts_from_trace: bool = True  # calibrate at the trace's shortest and longest contexts
    force: bool = False  # replace a validate run already in `out`

    def check(self) -> None:
        if self.repeats < 1:
            raise EcoSimError(f"--repeats {self.repeats}: must be at least 1")
        if self.trace is None and not self.prompts:
            raise EcoSimError("--prompts is needed (or --trace, a trace recorded earlier with the same model)")
        if self.hardware is not None and not self.hardware.is_file():
            raise EcoSimError(f"--hardware {self.hardware}: no such profile file")
        missing = [p for p in self.prompts if not p.exists()]
        if missing:
            raise EcoSimError(f"--prompts {missing[0]}: no such file or directory")
        if self.max_new_tokens < 1:
            raise EcoSimError(f"--max-new-tokens {self.max_new_tokens}: must be at least 1")
        if self.trace is not None and not (self.trace / MANIFEST).is_file():
            raise EcoSimError(f"--trace {self.trace}: no such trace (a directory with {MANIFEST})")
        for spec in self.choice.policies:
            if spec.predictor:
                check_predictor_name(spec.predictor)
        on_the_fly = sorted({s.predictor for s in self.choice.policies if s.predictor in KINDS})
        if on_the_fly:  # k-fold over the requests: enough requests, checked before recording or loading anything
            if self.trace is not None:
                n, where = len(read_manifest(self.trace)["requests"]), f"--trace {self.trace}"
            else:
                n = len(read_prompts(self.prompts, self.max_prompts))
                where = "--prompts" + (f" with --max-prompts {self.max_prompts}" if self.max_prompts else "")
            check_requests(n, on_the_fly[0], where)
        check_one_device(self.device)
        check_output(self.out, VALIDATE_RUN, force=self.force)
        resolve(self.model)  # a missing model fails here, before anything is written


def _record(cfg: RunConfig) -> Path:
    """The trace of the prompts, recorded on the spot with tracer's recorder (the simulator's input)."""
    from tracer.record import RecordConfig, run_record

    return run_record(RecordConfig(
        model=cfg.model, prompts=list(cfg.prompts), out=cfg.out / "trace", draft=cfg.draft,
        max_new_tokens=cfg.max_new_tokens, depth=cfg.depth, topk=cfg.topk, max_nodes=cfg.max_nodes,
        dtype=cfg.dtype, device=cfg.device, attn=cfg.attn, max_prompts=cfg.max_prompts, force=True,
        threads=cfg.threads, progress=cfg.progress, command=cfg.command,
    ))


def _tree_options(trace: Trace) -> tuple[int, int, int, int, bool]:
    """depth, topk, max_nodes, tokens per request and stop-at-eos, as the trace was recorded."""
    t = trace.manifest["tree"]
    opts = trace.manifest.get("recorded_on", {}).get("options", {})
    most = max((int(r["positions"]) for r in trace.manifest["requests"]), default=0)
    return (int(t["depth"]), int(t["topk"]), int(t["max_nodes"]), int(opts.get("max_new_tokens", most)),
            bool(opts.get("stop_at_eos", True)))


def _check_same_model(pair: Pair, trace: Trace) -> None:
    a = {k: v for k, v in pair.shape.to_manifest().items() if k not in ("source", "name")}
    b = {k: v for k, v in trace.manifest["model"].items() if k in a}
    diff = [k for k in a if a[k] != b.get(k)]
    if diff:
        raise EcoSimError(f"the trace was recorded from another model: {diff[0]} is {b.get(diff[0])!r} there, "
                          f"{a[diff[0]]!r} in {pair.source.ref}")


def first_divergence(expected: list[int], got: list[int]) -> int | None:
    """Index of the first differing token (or the shorter length), None when equal."""
    for i, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return i
    return None if len(expected) == len(got) else min(len(expected), len(got))


def trace_tokens(trace: Trace) -> dict[int, list[int]]:
    roots = trace.nodes["node"] == 0
    out: dict[int, list[int]] = {}
    for r in trace.manifest["requests"]:
        rid = int(r["request_id"])
        out[rid] = trace.nodes["token"][roots & (trace.nodes["request_id"] == rid)].astype(int).tolist()
    return out


def _median_steps(runs: list[Decoded]) -> tuple[list[Step], list[list[float]], bool]:
    """Steps of the first run with each phase the median over runs; per-step totals of every run;
    whether all runs took the same steps."""
    first = runs[0].steps
    same = all([(s.pos, s.verified, s.tokens) for s in r.steps] == [(s.pos, s.verified, s.tokens) for s in first] for r in runs)
    if not same:
        return first, [[s.seconds] for s in first], False
    out, totals = [], []
    for i, s in enumerate(first):
        ds = [r.steps[i] for r in runs]
        m = Step(**{**s.to_dict(),
                    "draft_s": float(np.median([d.draft_s for d in ds])),
                    "select_s": float(np.median([d.select_s for d in ds])),
                    "verify_s": float(np.median([d.verify_s for d in ds]))})
        out.append(m)
        totals.append([d.seconds for d in ds])
    return out, totals, True


def run_validation(cfg: RunConfig, say: Any = None) -> dict[str, Any]:
    """The whole `validate run` (module docstring); returns the comparison document."""
    from validate.compare import compare_run

    say = say or (lambda msg: print(f"validate: {msg}", file=sys.stderr))
    cfg.check()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    clock = make_clock(cfg.clock, cfg.device)  # before anything slow: a bad --clock fails at once
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / RUN_MARKER).touch()
    if cfg.trace is None:
        say(f"recording the trace of the prompts into {cfg.out / 'trace'}")
        trace_path = _record(cfg)
    else:
        trace_path = cfg.trace
    trace = read_trace(trace_path)
    depth, topk, max_nodes, max_new, stop_at_eos = _tree_options(trace)
    prompts = {int(r["request_id"]): list(r.get("prompt_ids") or []) for r in trace.manifest["requests"]}
    if any(not p for p in prompts.values()):
        raise EcoSimError(f"{trace_path}: a request has no prompt_ids; validate needs a recorded trace")
    say(f"loading {cfg.model} on {cfg.device}")
    pair = load_pair(cfg.model, cfg.draft, dtype=cfg.dtype, device=cfg.device, attn=cfg.attn)
    _check_same_model(pair, trace)
    recorded_tokens = trace_tokens(trace)

    cal: Calibration | None = None
    if cfg.hardware is None:  # calibrate on the spot, interleaved with the decoding rounds below
        budget = max([s.budget for s in cfg.choice.policies if s.speculative], default=0)
        most = min(budget, max_nodes) + 1  # the largest subtree any of the policies verifies
        calib = replace(cfg.calib, depth=depth, topk=topk, max_nodes=max_nodes, budget=max(budget, 1),
                        tokens=tuple(sorted({t for t in cfg.calib.tokens if t <= most} | {most})))
        if cfg.contexts_from_trace and len(trace.positions["context_len"]):
            ctx = trace.positions["context_len"]
            calib = replace(calib, contexts=tuple(sorted({int(ctx.min()), int(ctx.max())})))
        bench = ModelBench(pair, depth, topk, max_nodes, calib.budget, calib.seed, trace_text(trace))
        cal = Calibration(bench, clock, calib, design_for(calib, pair, trace))
        say(f"calibrating on the spot: {cal.remaining} timed verify runs (each of several tokens after a timed draft "
            "step), spread between the decoding rounds")

    policies = cfg.choice.policies
    say("greedy reference")
    reference = {rid: greedy(pair.target.model, p, max_new, pair.eos_ids, stop_at_eos) for rid, p in prompts.items()}
    selectors = [Selector(s, pair.shape, trace) for s in policies]
    dec = SpecDecoder(pair, clock, depth, topk, max_nodes, max_new, stop_at_eos)
    warm = SpecDecoder(pair, clock, depth, topk, max_nodes, min(max_new, 4), stop_at_eos)
    first = next(iter(prompts))
    for sel in selectors:
        warm.decode(sel, first, prompts[first])
    runs: dict[tuple[int, int], list[Decoded]] = {}
    say(f"decoding {len(prompts)} requests x {len(policies)} policies x {cfg.repeats} repeats")
    gc_was = gc.isenabled()
    rounds, done = cfg.repeats * len(prompts), 0
    try:
        for rep in range(cfg.repeats):
            for rid, p in prompts.items():
                gc.collect()
                gc.disable()
                for j, sel in enumerate(selectors):
                    runs.setdefault((j, rid), []).append(dec.decode(sel, rid, p))
                if gc_was:
                    gc.enable()
                done += 1
                if cal is not None:
                    cal.step(-(-cal.remaining // (rounds - done + 1)))
    finally:
        if gc_was:
            gc.enable()
    if cal is not None:
        cal.step()
        cal.bench.close()  # type: ignore[attr-defined]
        doc = profile_of(pair, cal.cfg, cal.samples, cfg.clock)
        profile_path = cfg.out / "profile.json"
        profile_path.write_text(json.dumps(doc, indent=1) + "\n")
        f = doc["calibration"]["fit"]
        say(f"profile: {f['bw'] / 1e9:.3g} GB/s, {f['peak'] / 1e9:.3g} GFLOP/s, overhead {f['overhead_s'] * 1e3:.3g} ms, "
            f"draft {f['draft_time_s'] * 1e3:.3g} ms, fit error {f['rel_rmse'] * 100:.2g}% rms over {f['cases']} cases")
        for w in f["warnings"]:
            say(f"warning: {w}")
    else:
        profile_path = cfg.hardware

    failures = []
    for (j, rid), rs in runs.items():
        for rep, r in enumerate(rs):
            at = first_divergence(reference[rid], r.tokens)
            if at is not None:
                failures.append({"policy": policies[j].label(), "request": rid, "repeat": rep, "position": at,
                                 "expected": reference[rid][at] if at < len(reference[rid]) else None,
                                 "got": r.tokens[at] if at < len(r.tokens) else None})
    trace_failures = []
    for rid, ref in reference.items():
        at = first_divergence(ref, recorded_tokens.get(rid, []))
        if at is not None:
            trace_failures.append({"request": rid, "position": at})

    rows, deterministic = [], True
    for (j, rid), rs in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        steps, totals, same = _median_steps(rs)
        deterministic &= same
        for s, tot in zip(steps, totals):
            d = s.to_dict()
            d.update(policy=policies[j].label(), policy_index=j, experts=int(sum(s.union)), measured_s=s.seconds,
                     run_seconds=tot)
            rows.append(d)
    steps_df = pl.DataFrame(rows, schema_overrides={"union": pl.List(pl.Int32), "run_seconds": pl.List(pl.Float64)})
    steps_df.write_parquet(cfg.out / "steps.parquet")
    env = environment(pair, cfg.clock)
    measured = {
        "schema": SCHEMA, "version": VERSION,
        "command": cfg.command,
        "model": pair.shape.name, "model_ref": cfg.model, "draft": pair.draft_info,
        "trace_draft": trace.manifest.get("draft", {}),
        "device": env["device"], "environment": env, "repeats": cfg.repeats,
        "trace": str(Path(trace_path).resolve()), "profile": str(Path(profile_path).resolve()),
        "tree": {"depth": depth, "topk": topk, "max_nodes": max_nodes}, "max_new_tokens": max_new,
        "choice": cfg.choice.to_dict(), "policies": [spec_dict(s) for s in policies],
        "requests": [{"request_id": rid, "prompt_tokens": len(p), "tokens": len(reference[rid])} for rid, p in prompts.items()],
        "lossless": not failures,
        "lossless_failures": failures,
        "trace_matches_greedy": not trace_failures,
        "trace_failures": trace_failures,
        "deterministic": deterministic,
    }
    (cfg.out / "measured.json").write_text(json.dumps(measured, indent=1) + "\n")
    return compare_run(cfg.out)


def command_line(argv: list[str]) -> str:
    return shlex.join(["validate", *argv])
