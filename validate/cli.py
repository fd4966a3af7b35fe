"""The `validate` command line: `calibrate`, `run`, `report`.

Exit status of `validate run` and `validate report` (also in their --help and README):
0 every check passed; 1 not lossless (one line names the first diverging position); 2 bad input
(one line, ecosim.cli.run); 3 lossless, but a fidelity target was missed (one line names it);
130 interrupted. `--no-fail` turns 3 into 0 (the table still says MISSED).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ecosim.cli import joined, make_app, run, wide_console
from ecosim.cli.adapter import knob_options, with_options
from ecosim.errors import EcoSimError
from ecosim.outputs import COMPARISON, PROFILE, check_output
from ecosim.policies import registry
from ecosim.tree_config import TREE, TreeShape
from validate.calibrate.config import CalibConfig

CALIB = CalibConfig()  # the defaults of `validate calibrate` and of the on-the-spot calibration

app = make_app("validate", "Run a policy end to end on real hardware and compare with what the simulator predicts.")

# shared options
Model = Annotated[str, typer.Option(help="Target: a pair directory (target/ and draft/), a checkpoint directory, a registry name or a hub id.")]
Draft = Annotated[str, typer.Option(help="Draft: 'default' (the pair's draft/ or the registry's), 'early-exit:N', a directory or a hub id.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N (one device; timings synchronise it).")]
Dtype = Annotated[str, typer.Option(help="auto (the checkpoint's), float32, bfloat16 or float16.")]
Attn = Annotated[str, typer.Option(help="Attention implementation: auto, eager or sdpa.")]
Threads = Annotated[int | None, typer.Option(help="torch CPU threads; calibrate and run with the same number.")]
Overlap = Annotated[str, typer.Option(help="How the profile combines memory and compute time: sum, max, or auto (sum on cpu, max on cuda).")]
ClockOpt = Annotated[str, typer.Option("--clock", help="wall: perf_counter, device synchronised (default); cpu: the thread's CPU time, "
                                                       "for a CPU shared with other jobs (--device cpu --threads 1 only).")]


def _ints(values: list[str], name: str) -> tuple[int, ...]:
    """A list option of positive integers, repeatable or a comma list (ecosim.cli.joined)."""
    text = joined(values) or ""
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise EcoSimError(f"{name} {text!r}: expected comma-separated integers, e.g. 1,2,4,8") from None
    if not vals or min(vals) < 1:
        raise EcoSimError(f"{name} {text!r}: expected positive integers")
    return vals


def _csv(values: tuple[int, ...]) -> list[str]:
    """A tuple default as the list of texts the option takes."""
    return [str(v) for v in values]


def _overlap(overlap: str, device: str) -> str:
    if overlap == "auto":
        return "max" if device.startswith("cuda") else "sum"
    if overlap not in ("sum", "max"):
        raise EcoSimError(f"--overlap must be sum, max or auto, got {overlap!r}")
    return overlap


def _threads(threads: int | None) -> None:
    import torch

    if threads is not None:
        if threads < 1:
            raise EcoSimError(f"--threads {threads}: must be at least 1")
        torch.set_num_threads(threads)


NoFail = Annotated[bool, typer.Option("--no-fail", help="Exit 0 when only a fidelity target is missed (a run that is not "
                                                         "lossless still exits 1).")]


@app.command()
def calibrate(
    model: Model,
    out: Annotated[Path, typer.Option(help="Profile JSON to write (ecosim replay --hardware reads it).")],
    draft: Draft = "default",
    device: DeviceOpt = "cpu",
    dtype: Dtype = "auto",
    attn: Attn = "auto",
    threads: Threads = 1,
    tokens: Annotated[list[str], typer.Option(help=CalibConfig.help("tokens") + " Repeatable or a comma list.")] = _csv(CALIB.tokens),
    levels: Annotated[int, typer.Option(help=CalibConfig.help("levels"))] = CALIB.levels,
    contexts: Annotated[list[str], typer.Option(help=CalibConfig.help("contexts") + " Repeatable or a comma list.")] = _csv(CALIB.contexts),
    repeats: Annotated[int, typer.Option(help=CalibConfig.help("repeats"))] = CALIB.repeats,
    depth: Annotated[int, typer.Option(help=TreeShape.help("depth") + " As recorded (tracer record --depth).")] = TREE.depth,
    topk: Annotated[int, typer.Option(help=TreeShape.help("topk") + " As recorded.")] = TREE.topk,
    max_nodes: Annotated[int, typer.Option(help=TreeShape.help("max_nodes") + " As recorded.")] = TREE.max_nodes,
    budget: Annotated[int, typer.Option(help=CalibConfig.help("budget"))] = CALIB.budget,
    overlap: Overlap = "auto",
    seed: Annotated[int, typer.Option(help=CalibConfig.help("seed"))] = CALIB.seed,
    clock: ClockOpt = "wall",
    prompts: Annotated[list[Path] | None, typer.Option(help="Prompt files (JSON Lines) whose text the contexts and draft roots are "
                                                            "cut from (default: the --trace's text, else random tokens).")] = None,
    trace: Annotated[Path | None, typer.Option(help="A trace recorded from this model: the verify cases become subtrees of its trees "
                                                    "with their recorded routing (default: a grid of tokens x expert unions).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a profile already at --out (any other file is never replaced).")] = False,
) -> None:
    """Measure this device as ecosim's cost model needs it: fit bandwidth, compute, overhead and draft time."""
    from tracer.pair import load_pair
    from validate.calibrate import HUGE
    from validate.calibrate.pair import calibrate_pair
    from validate.clock import make_clock
    from validate.run_config import check_one_device

    cfg = CalibConfig(tokens=_ints(tokens, "--tokens"), levels=levels, contexts=_ints(contexts, "--contexts"), repeats=repeats,
                      depth=depth, topk=topk, max_nodes=max_nodes, budget=budget, overlap=_overlap(overlap, device), seed=seed)
    cfg.check()
    check_output(out, PROFILE, force=force)
    check_one_device(device)
    _threads(threads)
    pair = load_pair(model, draft, dtype=dtype, device=device, attn=attn)
    text = None
    if prompts:
        from tracer.prompts import read_prompts, tokenize

        text = [t for ids in tokenize(read_prompts(prompts), pair.tokenizer, pair.target.vocab_size) for t in ids]
    recorded = None
    if trace is not None:
        from ecosim.trace.io import read_trace
        from validate.recorded import check_same_model

        recorded = read_trace(trace)
        check_same_model(pair, recorded)
    doc = calibrate_pair(pair, cfg, make_clock(clock, pair.target.device), clock, text=text, trace=recorded)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    f = doc["calibration"]["fit"]
    peak = "not measurable" if f["peak"] >= HUGE else f"{f['peak'] / 1e9:.4g} GFLOP/s"
    bw = "not measurable" if f["bw"] >= HUGE else f"{f['bw'] / 1e9:.4g} GB/s"
    print(f"wrote {out}: bandwidth {bw}, compute {peak}, overhead {f['overhead_s'] * 1e3:.4g} ms/step, "
          f"draft {f['draft_time_s'] * 1e3:.4g} ms/step (overlap {f['overlap']}); fit over {f['cases']} cases: "
          f"rms error {f['rel_rmse'] * 100:.2f}%, worst {f['max_rel_err'] * 100:.2f}%")
    for w in f["warnings"]:
        print(f"validate: warning: {w}", file=sys.stderr)


@app.command("run")
@with_options("knobs", lambda: knob_options(registry.knobs(), unset="With --policy:"))
def run_cmd(
    model: Model,
    out: Annotated[Path, typer.Option(help="Run directory to write: trace/, profile.json, measured.json, steps.parquet, comparison.{json,parquet}.")],
    prompts: Annotated[list[Path] | None, typer.Option(help="JSON Lines prompt files (tracer record's format); repeatable. Not needed with --trace.")] = None,
    winner: Annotated[Path | None, typer.Option(help="winner.json of `ecosim sweep` (or any JSON with policy, budget, lambda, predictor).")] = None,
    entry: Annotated[int | None, typer.Option(help="Which entry of the winner file's `winners` list (default: the only one with a configuration).")] = None,
    policy: Annotated[str | None, typer.Option(help=f"Instead of --winner: {', '.join(registry.runnable())}.")] = None,
    knobs: dict | None = None,
    draft: Draft = "default",
    device: DeviceOpt = "cpu",
    dtype: Dtype = "auto",
    attn: Attn = "auto",
    threads: Threads = 1,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens to generate per prompt (and positions to record).")] = 48,
    max_prompts: Annotated[int | None, typer.Option(help="Use at most N prompts of each file.")] = None,
    depth: Annotated[int, typer.Option(help=TreeShape.help("depth") + " Recording and decoding.")] = TREE.depth,
    topk: Annotated[int, typer.Option(help=TreeShape.help("topk"))] = TREE.topk,
    max_nodes: Annotated[int, typer.Option(help=TreeShape.help("max_nodes"))] = TREE.max_nodes,
    repeats: Annotated[int, typer.Option(help="Decode every prompt with every policy this many times; step phases are the median.")] = 3,
    hardware: Annotated[Path | None, typer.Option(help="A profile from `validate calibrate` (default: calibrate on the spot).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Use this recorded trace instead of recording one (its prompts and tree options are used).")] = None,
    calib_repeats: Annotated[int, typer.Option(help="On-the-spot calibration: runs of each case.")] = 8,
    calib_tokens: Annotated[list[str], typer.Option(help="On-the-spot calibration: tokens per verify forward (those up to the largest "
                                                         "budget + 1 are kept, and that size is added); repeatable or a comma list.")] = _csv(CALIB.tokens),
    calib_contexts: Annotated[list[str] | None, typer.Option(help="On-the-spot calibration: context lengths (default: the trace's shortest and longest); repeatable or a comma list.")] = None,
    overlap: Overlap = "auto",
    clock: ClockOpt = "wall",
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress messages.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a validate run already in --out (any other folder is never written into).")] = False,
    no_fail: NoFail = False,
) -> None:
    """Speculative decoding for real with the winner, ar and confidence; measure, check losslessness, compare.

    Exit status: 0 every check passed; 1 not lossless; 2 bad input; 3 a fidelity target missed
    (mean or worst error, ranking, winner faster than confidence); 130 interrupted. --no-fail
    turns 3 into 0.
    """
    from validate.choice import from_flags, read_winner
    from validate.measure import RunConfig, command_line, run_validation
    from validate.report import render

    knobs = knobs or {}
    flags = "/".join(k.flag for k in registry.knobs())
    given = any(v is not None for v in knobs.values())
    if winner is not None and (policy is not None or given):
        raise EcoSimError(f"give --winner or --policy (with {flags}), not both")
    if winner is None and policy is None:
        if given:
            raise EcoSimError(f"{flags} go with --policy")
        raise EcoSimError("say which policy to validate: --winner FILE or --policy NAME")
    choice = read_winner(winner, entry) if winner is not None else from_flags(policy, knobs)  # type: ignore[arg-type]
    contexts = _ints(calib_contexts, "--calib-contexts") if calib_contexts else None
    calib = CalibConfig(tokens=_ints(calib_tokens, "--calib-tokens"), repeats=calib_repeats, overlap=_overlap(overlap, device),
                        **({"contexts": contexts} if contexts else {}))
    calib.check()
    cfg = RunConfig(model=model, out=out, choice=choice, prompts=list(prompts or []), draft=draft, device=device, dtype=dtype,
                    attn=attn, threads=threads, max_new_tokens=max_new_tokens, max_prompts=max_prompts, depth=depth, topk=topk,
                    max_nodes=max_nodes, repeats=repeats, clock=clock, hardware=hardware, trace=trace, calib=calib, progress=not quiet,
                    command=command_line(sys.argv[1:]), contexts_from_trace=contexts is None, force=force)
    say = (lambda msg: None) if quiet else None
    doc = run_validation(cfg, say)
    render(doc, wide_console())
    _exit_on_failed_checks(doc, no_fail)


def missed_targets(doc: dict) -> list[str]:
    """The fidelity targets of a comparison that were missed, each in words."""
    tg, missed = doc["targets"], []
    if not tg["mae_pct"]["met"]:
        missed.append(f"mean absolute error {doc['mae_pct']:.2f}% > {tg['mae_pct']['target']:g}%")
    if not tg["worst_pct"]["met"]:
        missed.append(f"worst error {doc['worst_pct']:.2f}% > {tg['worst_pct']['target']:g}%")
    if not tg["ranking_preserved"]["met"]:
        missed.append("the simulated ranking of the policies differs from the measured one")
    w = tg.get("winner_faster_than_confidence")
    if w is not None and not w["met"]:
        missed.append("the winner was not faster than confidence in measured time")
    return missed


def _exit_on_failed_checks(doc: dict, no_fail: bool) -> None:
    """Exit 1 (not lossless) or 3 (a fidelity target missed, unless --no-fail), with one line saying why."""
    if not doc["lossless"]:
        f = doc["lossless_failures"][0]
        print(f"validate: error: not lossless: {f['policy']} request {f['request']} (repeat {f['repeat']}) diverges from "
              f"greedy decoding at position {f['position']} (expected token {f['expected']}, got {f['got']})", file=sys.stderr)
        raise typer.Exit(1)
    missed = missed_targets(doc)
    if missed and not no_fail:
        print(f"validate: error: fidelity target missed: {'; '.join(missed)} (--no-fail exits 0)", file=sys.stderr)
        raise typer.Exit(3)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A `validate run` directory.")],
    hardware: Annotated[Path | None, typer.Option(help="Re-price with another profile (default: the run's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison JSON instead of the table.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write comparison.json and comparison.parquet here instead of into RUN "
                                                  "(for a committed run, e.g. the test fixture).")] = None,
    no_fail: NoFail = False,
) -> None:
    """Print the comparison table; (re)write comparison.json and comparison.parquet (in RUN, or --out).

    Exit status: 0 every check passed; 1 not lossless; 2 bad input; 3 a fidelity target missed
    (mean or worst error, ranking, winner faster than confidence); 130 interrupted. --no-fail
    turns 3 into 0.
    """
    from validate.compare import compare_run
    from validate.report import render

    if not run_dir.is_dir():
        raise EcoSimError(f"{run_dir}: no such run directory")
    if hardware is not None and not hardware.is_file():
        raise EcoSimError(f"--hardware {hardware}: no such profile file")
    if out is not None:
        check_output(out, COMPARISON)
    doc = compare_run(run_dir, str(hardware) if hardware else None, out)
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        render(doc, wide_console())
    _exit_on_failed_checks(doc, no_fail)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return run(app, "validate", argv)


if __name__ == "__main__":
    raise SystemExit(main())
