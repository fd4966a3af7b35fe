"""The `validate` command line: `calibrate`, `run`, `report`, `device-check`.

Exit status of `validate run` and `validate report` (also in their --help and README):
0 every check passed; 1 not lossless (one line names the first diverging position); 2 bad input
(one line, ecosim.cli.run); 3 lossless, but a fidelity target was missed (one line names it);
130 interrupted. `--no-fail` turns 3 into 0 (the table still says MISSED). `validate device-check`:
0 every phase passed; 1 a phase failed; 2 bad input or a missing environment (one line).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ecosim.cli import interrupted, joined, make_app, run, wide_console
from ecosim.cli.adapter import knob_options, with_options
from ecosim.errors import EcoSimError, Interrupted
from ecosim.outputs import COMPARISON, PROFILE, check_output
from ecosim.policies import registry
from ecosim.tree_config import TREE, TreeShape
from validate.calibrate.config import CalibConfig
from validate.devicecheck.config import FULL_TARGETS, CheckConfig

CALIB = CalibConfig()  # the defaults of `validate calibrate` and of the on-the-spot calibration

app = make_app("validate", "Run a policy end to end on real hardware and compare with what the simulator predicts.")

# shared options
Model = Annotated[str, typer.Option(help="Target: a pair directory (target/ and draft/), a checkpoint directory, a registry name or a hub id.")]
Draft = Annotated[str, typer.Option(help="Draft: 'default' (the pair's draft/ or the registry's), 'early-exit:N', a directory or a hub id.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N (one device; timings synchronise it).")]
Dtype = Annotated[str, typer.Option(help="auto (the checkpoint's), float32, bfloat16 or float16.")]
Attn = Annotated[str, typer.Option(help="Attention implementation: auto, eager or sdpa.")]
Threads = Annotated[int | None, typer.Option(min=1, max=4096, help="torch CPU threads; calibrate and run with the same number.")]
Overlap = Annotated[str, typer.Option(help="How the profile combines memory and compute time: sum, max, or auto (sum on cpu, max on cuda).")]
ClockOpt = Annotated[str, typer.Option("--clock", help="auto (default): cpu on --device cpu with --threads 1, else wall; "
                                                       "wall: perf_counter, device synchronised; cpu: the thread's CPU time, "
                                                       "which leaves out waiting to be scheduled on a CPU shared with other "
                                                       "jobs (--device cpu --threads 1 only).")]


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
    levels: Annotated[int, typer.Option(min=1, max=127, help=CalibConfig.help("levels"))] = CALIB.levels,
    contexts: Annotated[list[str], typer.Option(help=CalibConfig.help("contexts") + " Repeatable or a comma list.")] = _csv(CALIB.contexts),
    repeats: Annotated[int, typer.Option(min=1, max=100_000, help=CalibConfig.help("repeats"))] = CALIB.repeats,
    depth: Annotated[int, typer.Option(min=1, max=127, help=TreeShape.help("depth") + " As recorded (tracer record --depth).")] = TREE.depth,
    topk: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("topk") + " As recorded.")] = TREE.topk,
    max_nodes: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("max_nodes") + " As recorded.")] = TREE.max_nodes,
    budget: Annotated[int, typer.Option(min=0, max=32766, help=CalibConfig.help("budget"))] = CALIB.budget,
    overlap: Overlap = "auto",
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help=CalibConfig.help("seed"))] = CALIB.seed,
    clock: ClockOpt = "auto",
    prompts: Annotated[list[Path] | None, typer.Option(help="Prompt files (JSON Lines) whose text the contexts and draft roots are "
                                                            "cut from (default: the --trace's text, else random tokens).")] = None,
    trace: Annotated[Path | None, typer.Option(help="A trace recorded from this model: the verify cases become subtrees of its trees "
                                                    "with their recorded routing (default: a grid of tokens x expert unions).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a profile already at --out (any other file is never replaced).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress (a bar in a terminal, else a line at every tenth of the runs).")] = False,
) -> None:
    """Measure this device as ecosim's cost model needs it: fit bandwidth, compute, overhead and draft time."""
    from tracer.pair import load_pair
    from validate.calibrate import HUGE
    from validate.calibrate.pair import calibrate_pair
    from validate.clock import make_clock, resolve_clock
    from validate.run_config import check_one_device

    cfg = CalibConfig(tokens=_ints(tokens, "--tokens"), levels=levels, contexts=_ints(contexts, "--contexts"), repeats=repeats,
                      depth=depth, topk=topk, max_nodes=max_nodes, budget=budget, overlap=_overlap(overlap, device), seed=seed)
    cfg.check()
    check_output(out, PROFILE, force=force)
    check_one_device(device)
    _threads(threads)
    clock = resolve_clock(clock, device, threads)
    clk = make_clock(clock, device)  # a bad --clock fails before the model is loaded
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
    from validate.calibrate.pair import design_for
    from validate.calibrate.progress import calibration_progress

    cases = len(design_for(cfg, pair, recorded))
    runs = cases * len(cfg.contexts) * cfg.repeats
    what = (f"{cases} verify cases x {len(cfg.contexts)} contexts x {cfg.repeats} repeats, each of more than one token "
            "after a timed draft step")
    with calibration_progress(runs, what, not quiet) as tick:
        doc = calibrate_pair(pair, cfg, clk, clock, progress=tick, text=text, trace=recorded)
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
    if device == "cpu":  # this machine as a host file: the `cpu` placement prices it (ecosim --placement cpu --host)
        host = out.with_name(out.stem + ".host.json")
        _write_host(doc, host, out.stem)
        print(f"wrote {host}: this machine as a host (ecosim replay --placement cpu --host {host})")


def _write_host(doc: dict, path: Path, name: str) -> None:
    from ecosim.catalog.hosts import from_calibration

    path.write_text(json.dumps(from_calibration(doc, name).to_dict(), indent=1) + "\n")


@app.command("host-file")
def host_file(
    profile: Annotated[Path, typer.Argument(help="A profile written by `validate calibrate` on a CPU.")],
    out: Annotated[Path, typer.Argument(help="Host JSON to write (ecosim --host reads it); never overwritten.")],
) -> None:
    """Write a calibrated CPU profile as a host file: the same model that prices a llama.cpp or KTransformers host
    prices this machine under `--placement cpu`."""
    if out.exists():
        raise EcoSimError(f"{out}: exists; refusing to overwrite it")
    try:
        doc = json.loads(profile.read_text())
    except (OSError, ValueError) as e:
        raise EcoSimError(f"{profile}: not a readable profile ({e})") from None
    if not isinstance(doc, dict) or "calibration" not in doc or "hbm_bw" not in doc:
        raise EcoSimError(f"{profile}: not a `validate calibrate` profile (no calibration)")
    _write_host(doc, out, profile.parent.name or profile.stem)
    print(f"wrote {out}")


@app.command("run")
@with_options("knobs", lambda: knob_options(registry.knobs(), unset="With --policy:"))
def run_cmd(
    model: Model,
    out: Annotated[Path, typer.Option(help="Run directory to write: trace/, profile.json, measured.json, steps.parquet, comparison.{json,parquet}.")],
    prompts: Annotated[list[Path] | None, typer.Option(help="JSON Lines prompt files (tracer record's format); repeatable. Not needed with --trace.")] = None,
    winner: Annotated[Path | None, typer.Option(help="winner.json of `ecosim sweep` (or any JSON with policy, budget, lambda, predictor).")] = None,
    entry: Annotated[int | None, typer.Option(min=0, help="Which entry of the winner file's `winners` list (default: the only one with a configuration).")] = None,
    policy: Annotated[str | None, typer.Option(help=f"Instead of --winner: {', '.join(registry.runnable())}.")] = None,
    knobs: dict | None = None,
    draft: Draft = "default",
    device: DeviceOpt = "cpu",
    dtype: Dtype = "auto",
    attn: Attn = "auto",
    threads: Threads = 1,
    max_new_tokens: Annotated[int, typer.Option(min=1, max=2**31 - 1, help="Tokens to generate per prompt (and positions to record).")] = 48,
    max_prompts: Annotated[int | None, typer.Option(min=1, help="Use at most N prompts of each file.")] = None,
    depth: Annotated[int, typer.Option(min=1, max=127, help=TreeShape.help("depth") + " Recording and decoding.")] = TREE.depth,
    topk: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("topk"))] = TREE.topk,
    max_nodes: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("max_nodes"))] = TREE.max_nodes,
    repeats: Annotated[int, typer.Option(min=1, max=100_000, help="Decode every prompt with every policy this many times; step phases are the median.")] = 3,
    hardware: Annotated[Path | None, typer.Option(help="A profile from `validate calibrate` (default: calibrate on the spot).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Use this recorded trace instead of recording one (its prompts and tree options are used).")] = None,
    calib_repeats: Annotated[int, typer.Option(min=1, max=100_000, help="On-the-spot calibration: runs of each case.")] = 8,
    retime: Annotated[bool, typer.Option("--retime/--no-retime", help="With --hardware: re-time a few of the on-the-spot "
                                         "design's cases between the decoding rounds and scale the stored profile to this "
                                         "run's pace (RUN/profile.json), so the machine's drift since calibration cancels.")] = True,
    retime_repeats: Annotated[int, typer.Option(min=1, max=100_000, help="With --hardware: runs of each re-timed case.")] = 2,
    calib_tokens: Annotated[list[str], typer.Option(help="On-the-spot calibration: tokens per verify forward (those up to the largest "
                                                         "budget + 1 are kept, and that size is added); repeatable or a comma list.")] = _csv(CALIB.tokens),
    calib_contexts: Annotated[list[str] | None, typer.Option(help="On-the-spot calibration: context lengths (default: the trace's shortest and longest); repeatable or a comma list.")] = None,
    overlap: Overlap = "auto",
    clock: ClockOpt = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress messages.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Start again in --out, replacing the validate run there (without it, the same command "
                                                    "continues an interrupted run; any other folder is never written into).")] = False,
    no_fail: NoFail = False,
) -> None:
    """Speculative decoding for real with the winner, ar and confidence; measure, check losslessness, compare.

    Exit status: 0 every check passed; 1 not lossless; 2 bad input; 3 a fidelity target missed
    (mean or worst error, ranking, winner faster than confidence); 130 interrupted. --no-fail
    turns 3 into 0. Work is committed as each request's round ends (RUN/parts/): rerunning the
    same command after an interruption continues it.
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
    from validate.clock import resolve_clock

    clock = resolve_clock(clock, device, threads)
    contexts = _ints(calib_contexts, "--calib-contexts") if calib_contexts else None
    calib = CalibConfig(tokens=_ints(calib_tokens, "--calib-tokens"), repeats=calib_repeats, overlap=_overlap(overlap, device),
                        **({"contexts": contexts} if contexts else {}))
    calib.check()
    cfg = RunConfig(model=model, out=out, choice=choice, prompts=list(prompts or []), draft=draft, device=device, dtype=dtype,
                    attn=attn, threads=threads, max_new_tokens=max_new_tokens, max_prompts=max_prompts, depth=depth, topk=topk,
                    max_nodes=max_nodes, repeats=repeats, clock=clock, hardware=hardware, trace=trace, calib=calib, progress=not quiet,
                    command=command_line(sys.argv[1:]), contexts_from_trace=contexts is None, force=force, retime=retime,
                    retime_repeats=retime_repeats)
    say = (lambda msg: None) if quiet else None
    try:
        doc = run_validation(cfg, say)
    except Interrupted as e:  # says what was committed and that the same command continues
        interrupted("validate", str(e))
    render(doc, wide_console())
    _exit_on_failed_checks(doc, no_fail)


@app.command("device-check")
def device_check(
    device: Annotated[str, typer.Option("--device", help=CheckConfig.help("device"))] = "cuda",
    out: Annotated[Path, typer.Option(help=CheckConfig.help("out"))] = Path("device-check"),
    small: Annotated[bool, typer.Option("--small", help=CheckConfig.help("small"))] = False,
    budget_s: Annotated[float, typer.Option("--budget-s", min=30, max=86_400, help=CheckConfig.help("budget_s"))] = 420.0,
    targets: Annotated[list[str], typer.Option(help=CheckConfig.help("targets") + " Repeatable or a comma list.")] = list(FULL_TARGETS),
    layers: Annotated[int, typer.Option(min=1, max=1024, help=CheckConfig.help("layers"))] = 2,
    dtype: Annotated[str, typer.Option(help=CheckConfig.help("dtype"))] = "auto",
    prompts: Annotated[int, typer.Option(min=1, max=10_000, help=CheckConfig.help("prompts"))] = 4,
    tokens: Annotated[int, typer.Option(min=1, max=1_000_000, help=CheckConfig.help("tokens"))] = 32,
    sample: Annotated[int, typer.Option(min=0, max=1_000_000, help=CheckConfig.help("sample"))] = 16,
    threads: Annotated[int | None, typer.Option(min=1, max=4096, help=CheckConfig.help("threads"))] = None,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help=CheckConfig.help("seed"))] = 0,
    force: Annotated[bool, typer.Option("--force", help=CheckConfig.help("force"))] = False,
) -> None:
    """Prove the GPU half in one command: build real-sized targets, record, recompute, calibrate, validate.

    Writes OUT/summary.json and OUT/summary.md as each phase ends. Exit status: 0 every phase
    passed; 1 a phase failed (the summary says which and why); 2 bad input, or the environment
    lacks something (one line: torch without CUDA, no device, too little memory); 130 interrupted.
    """
    from validate.devicecheck.check import main_line, run_check, say_stderr

    cfg = CheckConfig(device=device, out=out, small=small, budget_s=budget_s,
                      targets=tuple(t.strip() for t in (joined(targets) or "").split(",") if t.strip()), layers=layers, dtype=dtype,
                      prompts=prompts, tokens=tokens, sample=sample, threads=threads, seed=seed, force=force)
    print(f"validate device-check: device {cfg.device}, out {cfg.out}, small {cfg.small}, budget {cfg.budget_s:g} s, "
          f"targets {','.join(cfg.targets)}")
    try:
        doc = run_check(cfg, command_line_of(sys.argv[1:]), say_stderr)
    except KeyboardInterrupt:
        interrupted("validate", f"interrupted; what the finished phases measured is in {out}/summary.json")
    print(main_line(doc))
    print(f"wrote {out / 'summary.json'} and {out / 'summary.md'}")
    if not doc["passed"]:
        raise typer.Exit(1)


def command_line_of(argv: list[str]) -> str:
    import shlex

    return shlex.join(["validate", *argv])


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
