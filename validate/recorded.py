"""The recorded trace a validation runs on: recording it, and reading back what validate needs.

`validate run` decodes the very prompts the trace recorded, with the trace's tree options, so
that the simulator's prediction (made from the trace) and the measurement describe the same work.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ecosim.errors import EcoSimError
from ecosim.trace.io import Trace
from ecosim.tree_config import TreeShape
from tracer.pair import Pair
from tracer.sampler import Sampler


def record(cfg: Any) -> Path:
    """The trace of `cfg.prompts` recorded into `cfg.out/trace` with tracer's recorder (the
    simulator's input). Every option `cfg` shares by name with `RecordConfig` is passed on, so an
    option both commands take is forwarded without being listed here."""
    from tracer.record import RecordConfig, run_record

    shared = {f.name: getattr(cfg, f.name) for f in fields(RecordConfig) if hasattr(cfg, f.name)}
    return run_record(RecordConfig(**{**shared, "prompts": list(cfg.prompts), "out": cfg.out / "trace", "force": True}))


@dataclass(frozen=True)
class TraceOptions:
    """How the trace was recorded: its tree, tokens per request, whether it stopped at EOS, and how the target's
    tokens were chosen (greedy, or sampled: the same sampler and seed decode the run, so both follow the trace)."""

    tree: TreeShape
    max_new_tokens: int
    stop_at_eos: bool
    sampler: Sampler = Sampler()


def tree_options(trace: Trace) -> TraceOptions:
    """The tree, tokens per request and stop-at-eos, as the trace was recorded."""
    t = trace.manifest["tree"]
    opts = trace.manifest.get("recorded_on", {}).get("options", {})
    most = max((int(r["positions"]) for r in trace.manifest["requests"]), default=0)
    return TraceOptions(TreeShape(depth=int(t["depth"]), topk=int(t["topk"]), max_nodes=int(t["max_nodes"])),
                        int(opts.get("max_new_tokens", most)), bool(opts.get("stop_at_eos", True)), sampler_of(trace.manifest))


def sampler_of(manifest: dict[str, Any]) -> Sampler:
    """The sampler a trace was recorded with (its manifest's `decoding`; greedy when absent)."""
    d = manifest.get("decoding") or {"mode": "greedy"}
    if d.get("mode") != "sample":
        return Sampler()
    return Sampler(float(d["temperature"]), float(d.get("top_p", 1.0)), int(d.get("top_k", 0)), int(d.get("seed", 0)))


def check_same_sampler(given: Sampler, manifest: dict[str, Any], where: Path) -> None:
    """One line when --temperature/--top-p/--sample-top-k/--seed were given and differ from how `trace` was recorded."""
    if given.greedy:
        return  # not given: the trace's own decoding is used
    had = sampler_of(manifest)
    if had != given:
        raise EcoSimError(f"--trace {where} was recorded with decoding {had.decoding()}, not {given.decoding()}: "
                          "leave out the sampling options to use the trace's, or record another trace")


def check_same_model(pair: Pair, trace: Trace) -> None:
    """One line when `trace` was recorded from another model than `pair`'s target."""
    a = {k: v for k, v in pair.shape.to_manifest().items() if k not in ("source", "name")}
    b = {k: v for k, v in trace.manifest["model"].items() if k in a}
    diff = [k for k in a if a[k] != b.get(k)]
    if diff:
        raise EcoSimError(f"the trace was recorded from another model: {diff[0]} is {b.get(diff[0])!r} there, "
                          f"{a[diff[0]]!r} in {pair.source.ref}")


def prompt_ids(trace: Trace, trace_path: Path) -> dict[int, list[int]]:
    """request id -> its prompt's token ids; validate decodes exactly these."""
    prompts = {int(r["request_id"]): list(r.get("prompt_ids") or []) for r in trace.manifest["requests"]}
    if any(not p for p in prompts.values()):
        raise EcoSimError(f"{trace_path}: a request has no prompt_ids; validate needs a recorded trace")
    return prompts


def trace_tokens(trace: Trace) -> dict[int, list[int]]:
    """request id -> the tokens the trace decoded (its roots, in order)."""
    roots = trace.nodes["node"] == 0
    out: dict[int, list[int]] = {}
    for r in trace.manifest["requests"]:
        rid = int(r["request_id"])
        out[rid] = trace.nodes["token"][roots & (trace.nodes["request_id"] == rid)].astype(int).tolist()
    return out


def trace_text(trace: Trace) -> list[int]:
    """The trace's prompts and continuations as one token stream."""
    roots = trace_tokens(trace)
    return [t for r in trace.manifest["requests"] for t in list(r.get("prompt_ids") or []) + roots[int(r["request_id"])]]
