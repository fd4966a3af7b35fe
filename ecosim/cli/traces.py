"""`ecosim check`, `ecosim inspect`, `ecosim synth`: validate, summarise and generate traces."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ecosim.catalog.models import MODELS, get_model
from ecosim.cli import app, fail, wide_console
from ecosim.cli.routing import print_routing_stats
from ecosim.outputs import TRACE, check_output
from ecosim.tree_config import TREE, TreeShape
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.trace.io import check_trace, find_traces, read_trace

TraceArgs = Annotated[list[Path], typer.Argument(help="Trace directories, or directories holding traces (with --routing also routing sets and routing dumps).")]


@app.command()
def check(traces: TraceArgs) -> None:
    """Validate traces against the format (every invariant of docs/TRACE_FORMAT.md); exit 0 or 2."""
    for path in find_traces([str(p) for p in traces]):
        m = check_trace(path)
        positions = sum(r["positions"] for r in m["requests"])
        kind = "synthetic" if m["synthetic"] else "real"
        print(f"{path}: ok ({kind}, {m['model']['name']}, {len(m['requests'])} requests, {positions} positions)")


@app.command()
def inspect(
    traces: TraceArgs,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of the table.")] = False,
    routing: Annotated[bool, typer.Option("--routing", help="Routing statistics instead (neighbour overlap, distinct experts per window, token recall, popularity, tree overlaps); also takes routing sets and importable dumps.")] = False,
    fit_fraction: Annotated[float, typer.Option(min=0.05, max=0.95, help="With --routing: share of sequences the token table is fitted on (recall is measured on the rest).")] = 0.5,
    seed: Annotated[int, typer.Option(help="With --routing: seed of the fit/test split of sequences.")] = 0,
) -> None:
    """Summarise traces: model, requests by task, tree sizes, acceptance, expert usage, size on disk."""
    if routing:
        print_routing_stats(traces, as_json, fit_fraction, seed)
        return
    from ecosim.summary import BUDGET, summarize

    rows = [summarize(read_trace(p)) for p in find_traces([str(p) for p in traces])]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    t = Table(title="traces", title_justify="left")
    for col in ("trace", "data", "model (layers x experts, top-k)", "requests by task", "positions",
                "nodes/tree", "full-tree tok/step", f"confidence b={BUDGET} tok/step by task",
                "expert max/fair, dead (continuation | all nodes)", "disk"):
        t.add_column(col)
    for r in rows:
        usage = r["expert_usage"]
        by_task = ", ".join(f"{k} {v:.2f}" for k, v in r[f"confidence_b{BUDGET}_tokens_per_step_by_task"].items())
        t.add_row(
            r["trace"], "synthetic" if r["synthetic"] else "real",
            f"{r['model']} ({r['moe_layers']} x {r['num_experts']}, top-{r['top_k']})",
            ", ".join(f"{k} {v}" for k, v in r["requests_by_task"].items()),
            str(r["positions"]), f"{r['nodes_per_tree_mean']:.1f} (max {r['nodes_per_tree_max']})",
            f"{r['full_tree_tokens_per_step']:.2f}", by_task,
            f"{usage['max_over_fair']:.2f}, {usage['dead']} | {usage['all_nodes']['max_over_fair']:.2f}, "
            f"{usage['all_nodes']['dead']}",
            f"{r['disk_bytes'] / 1e6:.2f} MB",
        )
    wide_console().print(t)


@app.command()
def synth(
    out: Annotated[Path, typer.Argument(help="Directory to write the synthetic trace to.")],
    model: Annotated[str, typer.Option(help=f"Catalogue shape: {', '.join(sorted(MODELS))}.")] = "deepseek-v3.1",
    requests: Annotated[int, typer.Option(min=1, help="Requests (task kinds cycle coding, reasoning, qa, dialogue).")] = 4,
    positions: Annotated[int, typer.Option(min=1, help="Positions per request.")] = 256,
    depth: Annotated[int, typer.Option(min=1, max=64, help=TreeShape.help("depth"))] = TREE.depth,
    topk: Annotated[int, typer.Option(min=1, max=64, help=TreeShape.help("topk"))] = TREE.topk,
    max_nodes: Annotated[int, typer.Option(min=1, max=4096, help=TreeShape.help("max_nodes"))] = TREE.max_nodes,
    accept: Annotated[float, typer.Option(min=0.0, max=1.0, help="P(the target's next token is one of a node's draft children).")] = 0.8,
    confidence: Annotated[float, typer.Option(min=0.01, max=0.99, help="Mean draft probability of the top child.")] = 0.6,
    skew: Annotated[float, typer.Option(min=0.0, help="Zipf exponent of expert popularity (0 = uniform).")] = 1.0,
    token_affinity: Annotated[float, typer.Option(min=0.0, max=1.0, help="P(a routed slot takes the token's own expert).")] = 0.5,
    parent_affinity: Annotated[float, typer.Option(min=0.0, max=1.0, help="P(a routed slot copies the parent's expert).")] = 0.3,
    gates: Annotated[bool, typer.Option(help="Also write gate weights.")] = False,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same trace.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace a synthetic trace already in OUT (a real, recorded trace is never replaced).")] = False,
) -> None:
    """Generate a synthetic trace (marked synthetic: an illustration of the model, never a measurement)."""
    if token_affinity + parent_affinity > 1:
        fail("--token-affinity + --parent-affinity must be at most 1")
    check_output(out, TRACE, force=force, keep_protected=True, flag="")  # before generating, not after
    shape = get_model(model)
    cfg = SynthConfig(requests, positions, depth, topk, max_nodes, accept, confidence, skew, token_affinity,
                      parent_affinity, gates=gates, seed=seed)
    t0 = time.perf_counter()
    path = write_synthetic(out, shape, cfg)
    print(f"{path}: synthetic {shape.name} trace, {requests} requests x {positions} positions, "
          f"{time.perf_counter() - t0:.1f} s")
