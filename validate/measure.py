"""`validate run`, the measuring half: everything that needs the models, in six phases.

1. record a trace of the prompts on the spot with tracer's recorder (RUN/trace; the simulator's
   input), or take `--trace` (its prompts, tree options and token count are then used);
2. load the pair; take `--hardware PROFILE`, or calibrate on the spot (RUN/profile.json) on
   subtrees of the trace's trees of the sizes the policies verify (1 to the largest budget + 1:
   the fit is then local to the steps it must price), the calibration runs spread between the
   decoding rounds of 4 (so that calibration and measurement meet the same load from other
   processes);
3. decode every prompt plainly (`decode.plain`): greedily, or at T > 0 sampled with the trace's sampler and
   seed (the same random number for each generated index): the reference;
4. decode every prompt with each policy (the winner, `ar`, `confidence`), `repeats` times,
   interleaved (repeat -> request -> policy) so that load from other processes falls on all
   policies alike; each step's phases are the median over the repeats;
5. check losslessness: each policy's tokens, in every repeat, against the reference (the first
   diverging position is reported); the recorded trace's tokens too;
6. write RUN/measured.json and RUN/steps.parquet, then compare (compare.py).

Each piece of work is committed under RUN/parts/ as it ends (the trace, the reference, every
request's round of decodes, the calibration's runs so far: parts.py), so rerunning the same
command after an interruption continues where it stopped.
"""

from __future__ import annotations

import gc
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl
import torch

from ecosim.catalog.devices import get_device
from ecosim.cost import CostConfig
from ecosim.errors import Interrupted
from ecosim.placements import Hbm
from ecosim.simulate import cost_model
from ecosim.outputs import RUN_MARKER
from ecosim.trace.io import Trace, read_trace
from tracer.pair import Pair, load_pair
from validate.calibrate import Calibration
from validate.calibrate.pair import bench_for, design_for, environment, profile_of
from validate.choice import spec_dict
from validate.clock import Clock, make_clock
from validate.decode import Decoded, SpecDecoder, Step, plain
from validate.live import Selector
from validate.parts import Parts
from validate.recorded import (
    TraceOptions, check_same_model, prompt_ids, record, trace_text, trace_tokens, tree_options,
)
from validate.run_config import RunConfig

SCHEMA, VERSION = "validate-measurement", 1
Say = Callable[[str], None]
Runs = dict[tuple[int, int], list[Decoded]]  # (policy index, request id) -> one decode per repeat



def first_divergence(expected: list[int], got: list[int]) -> int | None:
    """Index of the first differing token (or the shorter length), None when equal."""
    for i, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return i
    return None if len(expected) == len(got) else min(len(expected), len(got))


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


# ----------------------------------------------------------------------------------------- phases


def obtain_trace(cfg: RunConfig, parts: Parts, say: Say) -> tuple[Path, Trace]:
    """Phase 1: the trace the simulator will predict from, recorded now from the prompts (so the
    measurement and the prediction describe the same requests) or the one given with --trace;
    a rerun takes the one it recorded before."""
    trace_path = cfg.trace or parts.trace()
    if trace_path is None:
        say(f"recording the trace of the prompts into {cfg.out / 'trace'}")
        trace_path = record(cfg)
        parts.save_trace(trace_path)
    return trace_path, read_trace(trace_path)


def start_calibration(cfg: RunConfig, pair: Pair, trace: Trace, opts: TraceOptions, clock: Clock,
                      say: Say) -> Calibration | None:
    """Phase 2: without --hardware, an on-the-spot calibration of the subtree sizes the policies
    verify (1 to the largest budget + 1), at the trace's contexts, so that the fit is local to the
    steps it must price; with --hardware, the same design at `retime_repeats` runs a case, the
    anchors that bring the stored profile to this run's pace (drift.py). It runs later, a slice
    between decoding rounds, so that calibration and measurement meet the same load from other
    processes."""
    if cfg.hardware is not None and not cfg.retime:
        return None
    tree = opts.tree
    budget = max([s.budget if s.budget is not None else tree.max_nodes for s in cfg.choice.policies if s.speculative],
                 default=0)  # a policy without a budget may verify the whole tree
    most = min(budget, tree.max_nodes) + 1  # the largest subtree any of the policies verifies
    calib = replace(cfg.calib, depth=tree.depth, topk=tree.topk, max_nodes=tree.max_nodes, budget=max(budget, 1),
                    tokens=tuple(sorted({t for t in cfg.calib.tokens if t <= most} | {most})))
    if cfg.contexts_from_trace and len(trace.positions["context_len"]):
        ctx = trace.positions["context_len"]
        calib = replace(calib, contexts=tuple(sorted({int(ctx.min()), int(ctx.max())})))
    if cfg.hardware is not None:
        calib = replace(calib, repeats=cfg.retime_repeats)
    cal = Calibration(bench_for(pair, calib, trace_text(trace)), clock, calib, design_for(calib, pair, trace))
    what = "re-timing the profile at this run's pace" if cfg.hardware is not None else "calibrating on the spot"
    say(f"{what}: {cal.remaining} timed verify runs (each of several tokens after a timed draft step), "
        "spread between the decoding rounds")
    return cal


def decode_all(cfg: RunConfig, pair: Pair, trace: Trace, opts: TraceOptions, prompts: dict[int, list[int]],
               clock: Clock, cal: Calibration | None, say: Say, parts: Parts) -> Runs:
    """Phase 4: every prompt with every policy, `repeats` times, interleaved (repeat -> request ->
    policy) so that load from other processes falls on all policies alike; the garbage collector
    runs between requests, never inside a timed decode; after each round, a slice of `cal`. Each
    round is committed as it ends; the rounds a rerun finds committed are taken, not decoded."""
    tree, max_new, stop = opts.tree, opts.max_new_tokens, opts.stop_at_eos
    policies = cfg.choice.policies
    # a policy that selects by the cost model prices with the profile given (before any re-timing)
    cost = cost_model(trace, get_device(str(cfg.hardware)), Hbm(), CostConfig()) if cfg.hardware is not None else None
    selectors = [Selector(s, pair.shape, trace, cost=cost) for s in policies]
    dec = SpecDecoder(pair, clock, tree.depth, tree.topk, tree.max_nodes, max_new, stop, opts.sampler)
    warm = SpecDecoder(pair, clock, tree.depth, tree.topk, tree.max_nodes, min(max_new, 4), stop, opts.sampler)
    runs: Runs = {}
    rounds, done = cfg.repeats * len(prompts), 0
    before = parts.rounds_done()
    first = next(iter(prompts))
    for sel in selectors if before < rounds else ():  # first use of each policy's code paths, untimed
        warm.decode(sel, first, prompts[first])
    say(f"decoding {len(prompts)} requests x {len(policies)} policies x {cfg.repeats} repeats"
        + (f" ({before} of {rounds} request rounds committed before: continuing)" if before else ""))
    if cal is not None:
        parts.restore_calibration(cal)
    gc_was = gc.isenabled()
    try:
        for rep in range(cfg.repeats):
            for rid, p in prompts.items():
                done += 1
                kept = parts.round(rep, rid, len(selectors))
                if kept is not None:
                    for j, d in enumerate(kept):
                        runs.setdefault((j, rid), []).append(d)
                    continue
                gc.collect()
                gc.disable()
                decodes = [dec.decode(sel, rid, p) for sel in selectors]
                if gc_was:
                    gc.enable()
                for j, d in enumerate(decodes):
                    runs.setdefault((j, rid), []).append(d)
                if cal is not None:
                    cal.step(-(-cal.remaining // (rounds - done + 1)))
                    parts.save_calibration(cal)
                parts.commit_round(rep, rid, decodes)
    finally:
        if gc_was:
            gc.enable()
    return runs


def finish_calibration(cfg: RunConfig, pair: Pair, trace: Trace, cal: Calibration | None, say: Say) -> Path:
    """Phase 4, end: run what is left of the calibration, fit it and write RUN/profile.json (with
    --hardware: the stored profile re-timed, drift.py; with --no-retime: the stored profile
    itself); the profile the comparison prices the trace with."""
    if cal is None:
        return cfg.hardware  # type: ignore[return-value]
    cal.step()
    cal.bench.close()  # type: ignore[attr-defined]
    profile_path = cfg.out / "profile.json"
    if cfg.hardware is not None:
        from validate.drift import retimed

        given = json.loads(Path(cfg.hardware).read_text())
        doc = retimed(given, pair.shape, cal.samples, max(cal.cfg.tokens), str(Path(cfg.hardware).resolve()))
        profile_path.write_text(json.dumps(doc, indent=1) + "\n")
        d = doc["calibration"]["drift"]
        say(f"profile {cfg.hardware} refitted on its {d['cases_kept']} cases of up to {d['most_tokens']} tokens and "
            f"re-timed on {d['anchor_runs']} verify and {d['anchor_drafts']} draft runs: this run verifies at "
            f"x{d['verify_factor']:.3f} and drafts at x{d['draft_factor']:.3f} the stored times (RUN/profile.json; "
            "--no-retime prices with the stored profile as it is)")
        return profile_path
    doc = profile_of(pair, cal.cfg, cal.samples, cfg.clock)
    profile_path.write_text(json.dumps(doc, indent=1) + "\n")
    f = doc["calibration"]["fit"]
    say(f"profile: {f['bw'] / 1e9:.3g} GB/s, {f['peak'] / 1e9:.3g} GFLOP/s, overhead {f['overhead_s'] * 1e3:.3g} ms, "
        f"draft {f['draft_time_s'] * 1e3:.3g} ms, fit error {f['rel_rmse'] * 100:.2g}% rms over {f['cases']} cases")
    for w in f["warnings"]:
        say(f"warning: {w}")
    return profile_path


def check_lossless(cfg: RunConfig, runs: Runs, reference: dict[int, list[int]],
                   recorded: dict[int, list[int]]) -> tuple[list[dict], list[dict]]:
    """Phase 5: (policy failures, trace failures). Speculative decoding must reproduce plain
    decoding (greedy, or sampled with the same seed) token for token in every repeat; the recorded trace must too, or the simulator
    predicted other work than was measured. Each failure names the first diverging position."""
    policies = cfg.choice.policies
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
        at = first_divergence(ref, recorded.get(rid, []))
        if at is not None:
            trace_failures.append({"request": rid, "position": at})
    return failures, trace_failures


def write_steps(cfg: RunConfig, runs: Runs) -> bool:
    """Phase 6: RUN/steps.parquet, one row per step of each (policy, request), its phases the
    median over the repeats; returns whether every repeat took the same steps (else the first
    repeat's steps are written with their own times)."""
    policies = cfg.choice.policies
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
    return deterministic


def run_validation(cfg: RunConfig, say: Any = None) -> dict[str, Any]:
    """The whole `validate run` (module docstring), phase by phase; returns the comparison document."""
    from validate.compare import compare_run

    say = say or (lambda msg: print(f"validate: {msg}", file=sys.stderr))
    cfg.check()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    clock = make_clock(cfg.clock, cfg.device)  # before anything slow: a bad --clock fails at once
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / RUN_MARKER).touch()
    parts = Parts(cfg.out)
    parts.start(cfg.resume_key(), cfg.force)
    total = "?"
    try:
        trace_path, trace = obtain_trace(cfg, parts, say)
        opts = tree_options(trace)
        prompts = prompt_ids(trace, trace_path)
        total = str(cfg.repeats * len(prompts))
        say(f"loading {cfg.model} on {cfg.device}")
        pair = load_pair(cfg.model, cfg.draft, dtype=cfg.dtype, device=cfg.device, attn=cfg.attn)
        check_same_model(pair, trace)
        cal = start_calibration(cfg, pair, trace, opts, clock, say)
        reference = parts.reference()
        if reference is None or set(reference) != set(prompts):
            say("greedy reference" if opts.sampler.greedy else f"sampled reference (T={opts.sampler.temperature:g})")
            reference = {rid: plain(pair.target.model, p, opts.max_new_tokens, pair.eos_ids, opts.stop_at_eos,
                                    opts.sampler, rid) for rid, p in prompts.items()}  # phase 3
            parts.save_reference(reference)
        runs = decode_all(cfg, pair, trace, opts, prompts, clock, cal, say, parts)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; {parts.rounds_done()} of {total} request rounds (a request decoded by every "
                          f"policy once) committed to {parts.dir}; rerun the same command to continue") from None
    profile_path = finish_calibration(cfg, pair, trace, cal, say)
    failures, trace_failures = check_lossless(cfg, runs, reference, trace_tokens(trace))
    deterministic = write_steps(cfg, runs)
    env = environment(pair, cfg.clock)
    measured = {
        "schema": SCHEMA, "version": VERSION,
        "command": cfg.command,
        "model": pair.shape.name, "model_ref": cfg.model, "draft": pair.draft_info,
        "trace_draft": trace.manifest.get("draft", {}),
        "device": env["device"], "environment": env, "repeats": cfg.repeats,
        "trace": str(Path(trace_path).resolve()), "profile": str(Path(profile_path).resolve()),
        "tree": opts.tree.to_dict(), "max_new_tokens": opts.max_new_tokens, "decoding": opts.sampler.decoding(),
        "choice": cfg.choice.to_dict(), "policies": [spec_dict(s) for s in cfg.choice.policies],
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
    """The command as typed, for the run's records."""
    return shlex.join(["validate", *argv])
