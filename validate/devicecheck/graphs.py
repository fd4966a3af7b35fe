"""Step time against tokens and distinct experts, eager and replayed from a CUDA graph.

For each case (n tokens whose routing is forced to a union of u experts per layer, bench.py) one
verify forward is timed eagerly (the loader's experts implementation, as `validate calibrate` times
it), then, on a CUDA device, captured once into a CUDA graph and replayed: a graph removes the
per-kernel launch cost that dominates a batch-1 step on a GPU (the TensorRT-LLM DeepSeek-R1 blogs
in NOTES.md), so the two columns bound what a serving engine's step costs. Capture needs every
shape known on the host: transformers' default MoE path picks each expert's tokens with a
data-dependent `nonzero`, which a capture refuses; the check then captures with the `batched_mm`
experts implementation (each token's k experts gathered and multiplied in one batched GEMM: no
host sync, but it reads n x k expert matrices where the eager path reads the union), and says
which implementation each graph figure used, or why none could be captured.

The forward is the model's own (`model(input_ids, position_ids, attention_mask, cache)`) on
device tensors made before the capture; the cache's entries before the capture are kept alive and
restored after each replay, so every replay reads the same context.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tracer.masks import build_masks
from validate.bench import ModelBench
from validate.calibrate.design import Case
from validate.clock import Clock

FALLBACK = "batched_mm"  # the experts implementation a capture can take (module docstring)


def _inputs(bench: ModelBench) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The verify forward's ids, positions and mask for the bench's prepared case, on the device."""
    lm, sub = bench.target, bench.sub
    assert sub is not None
    ctx = len(lm)
    pos = (torch.from_numpy(sub.depths) + ctx).to(lm.device)
    key_pos = torch.cat([lm.key_pos, pos])
    mask = build_masks(lm.windows, sub.ancestors().to(lm.device), ctx, pos, key_pos, lm.dtype)
    return torch.from_numpy(sub.tokens).to(lm.device), pos, mask


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) * 1e3


def eager_ms(bench: ModelBench, clock: Clock, repeats: int) -> float:
    """Median ms of the verify phase as the calibration times it (bench.run_verify)."""
    out = []
    for _ in range(repeats):
        t0 = clock.now()
        bench.run_verify()
        out.append(clock.now() - t0)
        bench.after_verify()
    return _median(out)


@torch.inference_mode()
def graph_ms(bench: ModelBench, clock: Clock, repeats: int) -> float:
    """Median ms of one replay of the captured verify forward (raises where capture fails)."""
    lm = bench.target
    ctx = len(lm)
    ids, pos, mask = _inputs(bench)
    saved = [(layer.keys, layer.values) for layer in lm.cache.layers]  # the context the replays read

    def restore() -> None:
        for layer, (k, v) in zip(lm.cache.layers, saved):
            layer.keys, layer.values = k, v

    def forward() -> Any:
        return lm.model(input_ids=ids[None], position_ids=pos[None], attention_mask=mask, cache=lm.cache, use_cache=True)

    bench._forced = bench._experts  # the forced routing, as in run_verify
    try:
        stream = torch.cuda.Stream(lm.device)
        stream.wait_stream(torch.cuda.current_stream(lm.device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up off the default stream, as capture requires
                forward()
                restore()
        torch.cuda.current_stream(lm.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
        restore()
        out = []
        for _ in range(repeats):
            t0 = clock.now()
            graph.replay()
            out.append(clock.now() - t0)
        del graph
        return _median(out)
    finally:
        bench._forced = None
        restore()
        lm.keep(ctx)


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:160]


def _captured_ms(bench: ModelBench, clock: Clock, repeats: int, impl: str, loaded: str) -> float:
    """graph_ms with the experts implementation `impl` switched in for the capture (then back)."""
    model = bench.pair.target.model
    if impl == loaded:
        return graph_ms(bench, clock, repeats)
    model.set_experts_implementation(impl)
    try:
        return graph_ms(bench, clock, repeats)
    finally:
        model.set_experts_implementation(loaded)


def step_table(bench: ModelBench, clock: Clock, cases: list[Case], context: int, repeats: int,
               graphs: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of (tokens, experts, eager ms, graph ms and the experts implementation it used), and
    notes: each experts implementation whose capture failed, with the first line of the error."""
    model = bench.pair.target.model
    loaded = getattr(model.config, "_experts_implementation", None) or "eager"
    candidates = [loaded] + ([FALLBACK] if loaded != FALLBACK and hasattr(model, "set_experts_implementation") else [])
    notes: list[str] = [] if graphs else ["not a CUDA device: CUDA graphs not measured"]
    rows = []
    bench.set_context(context)
    for case in cases:
        bench.prepare_verify(case.experts, case.parents)
        row: dict[str, Any] = {"tokens": case.n, "experts": int(sum(case.union)), "context": context,
                               "eager_ms": eager_ms(bench, clock, repeats), "experts_implementation": loaded,
                               "graph_ms": None, "graph_experts_implementation": None}
        while graphs and candidates:
            try:
                row["graph_ms"] = _captured_ms(bench, clock, repeats, candidates[0], loaded)
                row["graph_experts_implementation"] = candidates[0]
                break
            except Exception as e:  # noqa: BLE001  (a refused capture is a finding, not a crash)
                notes.append(f"CUDA graph capture with experts implementation {candidates[0]} failed: {_line(e)}")
                candidates.pop(0)
                bench.set_context(context)
        rows.append(row)
    return rows, notes
