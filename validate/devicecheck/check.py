"""The device check, phase by phase and target by target, inside its time budget (package docstring)."""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from ecosim.outputs import DEVICE_CHECK, check_output
from validate.devicecheck.config import CheckConfig
from validate.devicecheck.environment import EnvironmentMissing, check_environment
from validate.devicecheck.summary import Summary

REPO_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
PHASES = ("build", "record", "recompute", "calibrate", "run")
NEEDS = {"record": ("build",), "recompute": ("build", "record"), "calibrate": ("build", "record"),
         "run": ("build", "record", "calibrate")}  # what each phase of a target needs to have passed


def _need_bytes(cfg: CheckConfig) -> float:
    """Memory the largest target needs: its weights twice over (activations, caches, graph pools)."""
    if cfg.small:
        return 0.0
    from validate.devicecheck.targets import weight_bytes

    per = 4.0 if cfg.torch_dtype == "float32" else 2.0
    return 2.0 * max(weight_bytes(n, cfg.layers, per) for n in cfg.targets)


def _release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def run_check(cfg: CheckConfig, command: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Every phase; returns the summary document (also in OUT/summary.json and summary.md).
    EnvironmentMissing (exit 2) when phase 1 fails, after writing the summary."""
    cfg.check()
    check_output(cfg.out, DEVICE_CHECK, force=cfg.force)
    cfg = cfg.sizes()
    deadline = time.perf_counter() + cfg.budget_s
    summary = Summary(cfg.out, json_config(cfg), command)
    missing: EnvironmentMissing | None = None
    with summary.phase("environment") as ph:
        try:
            summary.doc["environment"] = check_environment(cfg.device, _need_bytes(cfg))
        except EnvironmentMissing as e:
            missing = e
            raise
    if missing is not None:
        raise missing
    say(f"environment: {summary.doc['environment']['device']}")
    import torch

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    for i, name in enumerate(cfg.targets):
        share = max(1.0, (deadline - time.perf_counter()) / (len(cfg.targets) - i))
        check_target(cfg, name, share, summary, say)
        _release(cfg.device)
    summary.write()
    return summary.doc


def json_config(cfg: CheckConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["out"] = str(cfg.out)
    return d


def check_target(cfg: CheckConfig, name: str, share: float, summary: Summary, say: Callable[[str], None]) -> None:
    """Phases 2-5 on one target; a failed phase skips those that need it."""
    from validate.devicecheck import phases
    from validate.devicecheck.plan import make_plan, probe, resize

    from validate.devicecheck.targets import family_of

    label = f"tiny {family_of(name)}" if cfg.small else name
    root = cfg.out / label.replace(" ", "-")
    tgt = summary.target(label)
    dtype = cfg.torch_dtype
    tree = phases.SMALL_TREE if cfg.small else {"depth": 6, "topk": 4, "max_nodes": 32}
    clock = "cpu" if (cfg.device == "cpu" and (cfg.threads or 0) == 1) else "wall"
    pair = None

    def gone(phase: str) -> bool:
        """Skip `phase` when a phase it needs failed (recompute's verdict blocks nothing)."""
        bad = [p["phase"] for p in summary.doc["phases"]
               if p["target"] == label and p["phase"] in NEEDS[phase] and p["status"] != "passed"]
        if bad:
            summary.skip(phase, label, f"needs {bad[0]}, which did not pass")
            return True
        return False

    say(f"{label}: building ({'tiny' if cfg.small else f'{cfg.layers} layers, real per-layer sizes'})")
    with summary.phase("build", label):
        from tracer.pair import load_pair
        from validate.devicecheck.targets import build_full, build_small

        model_dir = build_small(name, root / "model", cfg.seed) if cfg.small else \
            build_full(name, root / "model", cfg.layers, dtype, cfg.device, cfg.seed)
        pair = load_pair(str(model_dir), dtype=dtype, device=cfg.device)
        tgt["shape"] = pair.shape.to_manifest()
        plan = make_plan(share, probe(pair, tree), cfg.prompts, cfg.tokens, cfg.sample, tree, cfg.small, cfg.seed)
        tgt["plan"] = plan.to_dict()
    trace = root / "trace"
    profile = root / "profile.json"
    if not gone("record"):
        say(f"{label}: recording {plan.prompts} prompts x {plan.tokens} tokens")
        with summary.phase("record", label):
            prompts = phases.prompts_file(REPO_PROMPTS, root / "prompts.jsonl", plan.prompts)
            tgt["record"] = phases.record_phase(model_dir, prompts, trace, plan, cfg.device, dtype, cfg.threads)
    if "record" in tgt:  # the recording's own pace sizes what is left
        spent = next(p["seconds"] for p in summary.doc["phases"][::-1] if p["phase"] == "record" and p["target"] == label)
        left = share - sum(p["seconds"] for p in summary.doc["phases"] if p["target"] == label)
        resize(plan, max(left, 1.0), spent / max(1, tgt["record"]["positions"]))
        tgt["plan"] = plan.to_dict()
    if not gone("recompute"):
        say(f"{label}: recomputing {plan.sample} nodes by plain decoding")
        with summary.phase("recompute", label) as ph:
            tgt["recompute"] = r = phases.recompute_phase(pair, trace, plan.sample, cfg.seed)
            if not r["passed"]:
                ph.update(status="failed", why=f"{r['nodes'] - r['target_next_equal']} of {r['nodes']} nodes: tree "
                                               "verification's next token differs from plain decoding's")
    if not gone("calibrate"):
        say(f"{label}: calibrating ({plan.calib_repeats} repeats)")
        with summary.phase("calibrate", label):
            tgt["calibrate"] = phases.calibrate_phase(pair, trace, profile, plan, clock)
    del pair
    _release(cfg.device)
    if not gone("run"):
        say(f"{label}: validate run ({plan.repeats} repeats)")
        with summary.phase("run", label) as ph:
            tgt["run"] = r = phases.run_phase(model_dir, trace, profile, root / "run", plan, cfg.device, dtype,
                                              cfg.threads, clock)
            if not r["lossless"]:
                ph.update(status="failed", why="a policy's tokens differ from plain greedy decoding")


def main_line(doc: dict[str, Any]) -> str:
    """One line for the terminal: passed or which phases did not."""
    bad = [f"{p['phase']}{' (' + p['target'] + ')' if p['target'] else ''}: {p['status']}"
           for p in doc["phases"] if p["status"] != "passed"]
    return "device check passed" if not bad else "device check: " + "; ".join(bad)


def say_stderr(msg: str) -> None:
    print(f"validate: {msg}", file=sys.stderr)
