"""`ecosim import-routing` and `ecosim inspect --routing`: real routing in, statistics side by side."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ecosim.catalog.models import get_model, in_catalogue
from ecosim.cli import app, fail, wide_console
from ecosim.errors import EcoSimError
from ecosim.routing.data import Routing, is_routing_dir, read_routing, trace_continuation, write_routing
from ecosim.routing.importers import FORMATS, import_routing
from ecosim.routing.stats import SHOWN_WINDOWS, routing_stats
from ecosim.trace.io import Trace, find_traces, read_trace
from ecosim.trace.schema import MANIFEST


def load_any(path: Path) -> list[tuple[str, Routing, Trace | None]]:
    """A routing directory, an importable source, or traces (each a continuation plus its trees)."""
    if is_routing_dir(path):
        return [(str(path), read_routing(path), None)]
    if path.is_dir() and ((path / MANIFEST).is_file() or next(path.rglob(MANIFEST), None) is not None):
        out = []
        for p in find_traces([str(path)]):
            t = read_trace(p)
            out.append((str(p), trace_continuation(t), t))
        return out
    return [(str(path), import_routing(path), None)]


def _groups(r: Routing, trace: Trace | None) -> tuple[int, int]:
    """The router's group limits: the trace's shape, else the routing's model where the catalogue or its
    config.json names it (a routing of an unknown model has none)."""
    if trace is not None:
        return trace.model.group_limits
    try:
        return get_model(r.model).group_limits if r.model != "unknown" else (0, 0)
    except EcoSimError:
        return (0, 0)


def _checks(s: dict[str, Any]) -> str:
    parts = []
    if "same_context" in s:
        c = s["same_context"]
        parts.append("-" if not c["pairs"] else f"{100 * c['identical']:.1f}% of {c['pairs']}")
    if "group_span" in s:
        g = s["group_span"]
        parts.append(f"{g['max']} of {g['n_group']} groups max, {100 * g['within_limit']:.1f}% within {g['topk_group']}")
    return "; ".join(parts) or "-"


def _row(s: dict[str, Any]) -> list[str]:
    o = s["overall"]
    t = s.get("trees") or {}
    tree_n = t.get("distinct_by_tree_size", {})

    def f(x: Any, nd: int = 2) -> str:
        return "-" if x is None else f"{x:.{nd}f}"

    return [
        s["name"], s["provenance"], f"{s['model']} ({s['layers']} x {s['num_experts']}, top-{s['top_k']})",
        f"{s['sequences']} / {s['tokens']}", f(o["neighbour_overlap"]),
        " / ".join(f(o["window_distinct"][str(n)], 1) for n in SHOWN_WINDOWS),
        f"{f(o['token_recall'])} ({f(o['popularity_recall'])})",
        f"{f(o['max_over_fair'])} / {f(o['max_over_fair_median_layer'])}, {o['dead']}",
        f"{f(t.get('sibling_overlap'))} / {f(t.get('parent_child_overlap'))}" if t else "-",
        " / ".join(f(tree_n.get(str(n)), 1) for n in (4, 16, 32)) if t else "-",
        _checks(s),
    ]


def print_routing_stats(paths: list[Path], as_json: bool, fraction: float, seed: int) -> None:
    rows = []
    for p in paths:
        for name, r, trace in load_any(p):
            rows.append(routing_stats(r, trace, name=name, fraction=fraction, seed=seed, groups=_groups(r, trace)))
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    t = Table(title=f"routing statistics (mean over layers; recall fitted on {fraction:.0%} of sequences, seed {seed})",
              title_justify="left")
    for col in ("source", "data", "model", "seqs / tokens", "neighbour overlap",
                "distinct in " + "/".join(map(str, SHOWN_WINDOWS)) + " tokens", "token recall@k (popularity)",
                "max/fair: busiest / median layer, dead", "sibling / parent-child overlap", "distinct in tree of 4/16/32",
                "same token+context identical; group span"):
        t.add_column(col)
    for s in rows:
        t.add_row(*_row(s))
    wide_console().print(t)


def print_preset_checks(paths: list[Path], presets: list[str], as_json: bool, fraction: float, seed: int) -> None:
    """Each preset against each real routing set, on the sequences a fit with this seed leaves out."""
    from ecosim.routing.check import TARGETS, check_preset
    from ecosim.routing.generator import RoutingKnobs
    from ecosim.routing.presets import knobs_of, load_preset

    rows = []
    for p in paths:
        for name, r, trace in load_any(p):
            held = r.split(fraction, seed)[1]
            n_group, topk_group = _groups(r, trace)
            for pre in presets:
                d = load_preset(pre)
                knobs = RoutingKnobs(**knobs_of(d), n_group=n_group, topk_group=topk_group)
                rows.append({"routing": name, "preset": pre, "preset_source": d["source"], "held_out_seed": seed,
                             **check_preset(held, knobs, seed=seed)})
    if as_json:
        print(json.dumps(rows, indent=1, default=float))
        return
    t = Table(title=f"presets against real routing they were not fitted on (the {1 - fraction:.0%} a fit with seed {seed} leaves out; "
              f"targets: window within {TARGETS['window']:.0%}, overlap and recall within {TARGETS['overlap']})", title_justify="left")
    for col in ("preset", "real routing", "seqs / tokens", "neighbour overlap real / generated",
                "distinct in 4/16/64 real / generated", "worst window n = 2..64", "token recall real / generated",
                "max/fair median layer real / generated", "meets"):
        t.add_column(col)
    for c in rows:
        a, g = c["real"], c["generated"]
        w = " / ".join(f"{a['window_distinct'][n]:.1f}" for n in (4, 16, 64)) + "  |  " + " / ".join(f"{g['window_distinct'][n]:.1f}" for n in (4, 16, 64))
        rec = "-" if a["token_recall"] is None else f"{a['token_recall']:.2f} / {g['token_recall']:.2f}"
        t.add_row(c["preset"], c["routing"], f"{c['sequences']} / {c['tokens']}",
                  f"{a['neighbour_overlap']:.2f} / {g['neighbour_overlap']:.2f}", w,
                  f"{100 * c['window_worst']['rel_error']:.1f}% (n = {c['window_worst']['n']})", rec,
                  f"{a['max_over_fair_median']:.2f} / {g['max_over_fair_median']:.2f}",
                  ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in c["meets"].items()))
    wide_console().print(t)


@app.command("import-routing")
def import_routing_cmd(
    source: Annotated[Path, typer.Argument(help="A routing dump: a routing.npz + meta.json folder, a vLLM routed_experts .npy/.npz/.json, an SGLang per_token dump as JSON, a Megatron-Core router trace .jsonl, or a research layout (atomic events .npz, per-layer CSV, per-request step lists .json; a file or a folder of them; docs/ROUTING_FORMAT.md).")],
    out: Annotated[Path, typer.Option("--out", help="New directory to write the routing set to (never overwritten).")],
    fmt: Annotated[str | None, typer.Option("--format", help=f"Source format ({', '.join(FORMATS)}); detected from the layout if omitted.")] = None,
    model: Annotated[str | None, typer.Option(help="Catalogue shape, or a Hugging Face MoE config.json (or its directory), the routing comes from (sets the model name and expert count).")] = None,
    num_experts: Annotated[int | None, typer.Option(min=2, max=32767, help="Routed experts per layer, when the source does not say (default: the --model's, else the largest id + 1).")] = None,
    credit: Annotated[str | None, typer.Option(help="Source and licence to credit wherever the routing is used.")] = None,
) -> None:
    """Import real routing into ecosim's routing layout (docs/ROUTING_FORMAT.md), labelled real."""
    if out.exists():
        fail(f"{out}: exists; refusing to overwrite it (choose a new --out)")
    shape = get_model(model) if model else None
    t0 = time.perf_counter()
    # a catalogue name, or the config.json's absolute path, so that `predictor` finds the shape again
    name = None if not shape else model if in_catalogue(model or "") else str(Path(shape.source).resolve())
    r = import_routing(source, fmt, model=name,
                       num_experts=num_experts or (shape.num_experts if shape else None), credit=credit)
    if shape and (r.layers, r.top_k) != (shape.num_moe_layers, shape.top_k):
        fail(f"{source}: {r.layers} layers x top-{r.top_k}, but {shape.name} has {shape.num_moe_layers} x top-{shape.top_k}")
    write_routing(out, r)
    print(f"{out}: real routing of {r.model} from {r.source.get('format', fmt)} ({len(r.seq_len)} sequences, {r.n_tokens} tokens, "
          f"{r.layers} layers x {r.num_experts} experts, top-{r.top_k}), {time.perf_counter() - t0:.1f} s")
