"""`ecosim check`, `ecosim inspect`, `ecosim synth`: validate, summarise and generate traces."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ecosim.catalog.models import MODELS, get_model, in_catalogue
from ecosim.cli import app, fail, wide_console
from ecosim.cli.routing import print_preset_checks, print_routing_stats
from ecosim.cli.values import check_synth_size
from ecosim.hybrid import write_hybrid
from ecosim.outputs import TRACE, check_output
from ecosim.routing.calibrate import START, fit, moments_plain, write_preset
from ecosim.routing.presets import KNOBS, knobs_of, load_preset, preset_knobs, shipped_preset
from ecosim.routing.scale import RoutingShape, scaled_start
from ecosim.routing.data import is_routing_dir, read_routing
from ecosim.routing.importers import import_routing
from ecosim.synth import SynthConfig, write_synthetic
from ecosim.synth_draft import DRAFTS, default_draft, dense_draft, get_draft
from ecosim.catalog.accept_table import choose, falloff, lookup
from ecosim.trace.io import check_trace, find_traces, provenance_of, read_trace
from ecosim.tree_config import TREE, TreeShape

TraceArgs = Annotated[list[Path], typer.Argument(help="Trace directories, or directories holding traces (with --routing also routing sets and routing dumps).")]


@app.command()
def check(traces: TraceArgs) -> None:
    """Validate traces against the format (every invariant of docs/TRACE_FORMAT.md); exit 0 or 2."""
    for path in find_traces([str(p) for p in traces]):
        m = check_trace(path)
        positions = sum(r["positions"] for r in m["requests"])
        kind = provenance_of(m)
        print(f"{path}: ok ({kind}, {m['model']['name']}, {len(m['requests'])} requests, {positions} positions)")


@app.command()
def inspect(
    traces: TraceArgs,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of the table.")] = False,
    routing: Annotated[bool, typer.Option("--routing", help="Routing statistics instead (neighbour overlap, distinct experts per window, token recall, popularity, tree overlaps); also takes routing sets and importable dumps.")] = False,
    fit_fraction: Annotated[float, typer.Option(min=0.05, max=0.95, help="With --routing: share of sequences the token table is fitted on (recall is measured on the rest).")] = 0.5,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="With --routing: seed of the fit/test split of sequences.")] = 0,
    check_preset: Annotated[list[str] | None, typer.Option("--check-preset", help="With --routing: route each real set's own tokens with this preset (a shipped name or a preset file; repeatable or a comma list) and compare with the real routing on the sequences a fit with --seed and --fit-fraction leaves out (ecosim/routing/check.py).")] = None,
) -> None:
    """Summarise traces: model, requests by task, tree sizes, acceptance, expert usage, size on disk."""
    if routing:
        if check_preset:
            print_preset_checks(traces, [n.strip() for o in check_preset for n in o.split(",") if n.strip()], as_json, fit_fraction, seed)
            return
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
            r["trace"], r.get("provenance", "synthetic" if r["synthetic"] else "real"),
            f"{r['model']} ({r['moe_layers']} x {r['num_experts']}, top-{r['top_k']})",
            ", ".join(f"{k} {v}" for k, v in r["requests_by_task"].items()),
            str(r["positions"]), f"{r['nodes_per_tree_mean']:.1f} (max {r['nodes_per_tree_max']})",
            f"{r['full_tree_tokens_per_step']:.2f}", by_task,
            f"{usage['max_over_fair']:.2f}, {usage['dead']} | {usage['all_nodes']['max_over_fair']:.2f}, "
            f"{usage['all_nodes']['dead']}",
            f"{r['disk_bytes'] / 1e6:.2f} MB",
        )
    wide_console().print(t)


def _published_acceptance(shape, draft: str, depth: int | None, topk: int | None, use: bool, temperature: float = 0.0):
    """The published acceptance length synth matches when the user names a --draft but gives no --accept-len
    (accept_table.py), measured at the trace's temperature, saying where it comes from; without --draft (the default
    draft) the figure is only pointed at, so a trace generated without naming a draft keeps --accept per node, as it
    always has."""
    entries, whence = lookup(shape, draft, temperature)
    e = choose(entries, depth, topk)
    if e is None:
        print(f"acceptance: no published figure for {draft} on {shape.name} or its family at T={temperature:g}; "
              "--accept per node as given (give --accept-len with its source)")
        return None
    if not use:
        print(f"acceptance: --accept per node as given; a published figure exists ({e.describe()}): "
              f"add --draft {draft} to match it")
        return None
    print(f"acceptance: {e.describe()}; {whence}; --accept-len overrides")
    if (depth is not None and depth != e.steps) or (topk is not None and topk != e.topk):
        print(f"acceptance: matched on the figure's own tree ({e.steps} steps, top-k {e.topk}, {e.draft_tokens} tokens); "
              f"this trace's tree (depth {depth or e.steps}, top-k {topk or e.topk}) grows with the same per-node "
              "acceptance, so each depth accepts what it implies there")
    return e


@app.command()
def synth(
    out: Annotated[Path, typer.Argument(help="Directory to write the trace to (with --calibrate: the preset .json to write).")],
    model: Annotated[str, typer.Option(help=f"Catalogue shape ({', '.join(sorted(MODELS))}) or a Hugging Face MoE config.json (or its directory).")] = "deepseek-v3.1",
    requests: Annotated[int, typer.Option(min=1, max=2**31 - 1, help="Requests (task kinds cycle coding, reasoning, qa, dialogue; with --routing: real sequences).")] = 4,
    positions: Annotated[int, typer.Option(min=1, max=2**31 - 1, help="Positions per request (with --routing: at most).")] = 256,
    depth: Annotated[int | None, typer.Option(min=1, max=64, help=TreeShape.help("depth") + f" Default {TREE.depth}, or the --draft's.")] = None,
    topk: Annotated[int | None, typer.Option(min=1, max=64, help=TreeShape.help("topk") + f" Default {TREE.topk}, or the --draft's.")] = None,
    max_nodes: Annotated[int | None, typer.Option(min=1, max=4096, help=TreeShape.help("max_nodes") + f" Default {TREE.max_nodes}, or the draft tokens of the published acceptance used.")] = None,
    accept: Annotated[float, typer.Option(min=0.0, max=1.0, help="P(the target's next token is one of a node's draft children); overridden by --accept-len or the --draft's published figure.")] = 0.8,
    accept_len: Annotated[float | None, typer.Option(min=1.0, help="Mean accepted tokens per step to match (a published acceptance length of the imitated draft). Default: the draft's own figure, else the published table's for this model or its family (catalog/data/published.json; the source is printed), else --accept per node.")] = None,
    accept_decay: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="How acceptance falls with depth: tree level d is accepted with probability --accept x this^(d - 1). Default: fitted on a published curve of the draft's step counts where one source published one (catalog/accept_table.py; the fit is printed), else 1 (every level alike).")] = None,
    draft: Annotated[str | None, typer.Option(help=f"Draft kind imitated ({', '.join(DRAFTS)}): its bytes per level go in the manifest; default mtp for DeepSeek-V3, eagle3 otherwise.")] = None,
    draft_model: Annotated[Path | None, typer.Option(help="A separate dense draft model's config.json (or its folder): its bytes and layers price each draft level (implies --draft model).")] = None,
    confidence: Annotated[float, typer.Option(min=0.01, max=0.99, help="Mean draft probability of the top child.")] = 0.6,
    temperature: Annotated[float, typer.Option(min=0.0, max=100.0, help="Label the trace sampled at this temperature (target-only verification, trace format version 3); needs --accept-len measured at that temperature, or --draft with a figure published at it, since sampling lowers acceptance (traces-sampled/ halves it on the committed pair).")] = 0.0,
    preset: Annotated[str | None, typer.Option(help="Routing knobs from a preset (a shipped model name or a .json from --calibrate); default: the model's shipped preset; 'none' for the knobs below.")] = None,
    skew: Annotated[float | None, typer.Option(min=0.0, help="Zipf exponent of expert popularity (0 = uniform); default from the preset, else 1.0.")] = None,
    token_affinity: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Weight of the token's own experts; default from the preset, else 0.5.")] = None,
    parent_affinity: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Weight of the previous token's (parent's) experts; default from the preset, else 0.3.")] = None,
    context: Annotated[float | None, typer.Option(min=0.0, help="Strength of the per-request context; default from the preset, else 0.")] = None,
    context_share: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Share of experts the context favours (0 = graded); default from the preset, else 0.")] = None,
    routing: Annotated[Path | None, typer.Option("--routing", help="Hybrid trace: the continuation from this real routing set (import-routing output), rejected branches generated.")] = None,
    calibrate: Annotated[Path | None, typer.Option(help="Fit the routing knobs to this real routing set and write a preset to OUT instead of a trace.")] = None,
    fit_fraction: Annotated[float, typer.Option(min=0.1, max=1.0, help="With --calibrate: share of sequences fitted on; the rest are the check reported.")] = 0.5,
    gates: Annotated[bool, typer.Option(help="Also write gate weights.")] = False,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Random seed; the same seed gives the same trace.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace a synthetic or hybrid trace already in OUT (a real, recorded trace is never replaced).")] = False,
    host: Annotated[str | None, typer.Option(help="Also say whether the model's weights fit this host's RAM (a catalogue host or a host .json) under cpu-moe and cpu, at --dtype.")] = None,
    dtype: Annotated[str | None, typer.Option(help="With --host: the weights' type for that check (bf16, fp8, a GGUF type such as q4_k_m); default: the model's own.")] = None,
) -> None:
    """Generate a synthetic or hybrid trace (labelled so: an illustration, never a measurement), or fit a preset."""
    if calibrate is not None:
        _calibrate(out, model, calibrate, fit_fraction, seed)
        return
    check_output(out, TRACE, force=force, keep_protected=True, flag="")  # before generating, not after
    shape = get_model(model)
    fits = host_fit(shape, host, dtype) if host is not None else None  # a bad host or dtype: one line, before any work
    given = {"skew": skew, "token_affinity": token_affinity, "parent_affinity": parent_affinity, "context": context,
             "context_share": context_share}
    knobs, source = {"skew": 1.0, "token_affinity": 0.5, "parent_affinity": 0.3, "context": 0.0, "context_share": 0.0}, "defaults"
    name = preset if preset is not None else (shipped_preset(shape) or "none")
    if name != "none":
        p = load_preset(name)
        knobs, source = knobs_of(p), f"preset {name}: {p['source']}"
    knobs.update({k: v for k, v in given.items() if v is not None})
    if knobs["token_affinity"] + knobs["parent_affinity"] > 1:
        fail("--token-affinity + --parent-affinity must be at most 1")
    if draft_model is not None and draft not in (None, "model"):
        fail(f"--draft-model is a separate draft model: it goes with --draft model, not --draft {draft}")
    if temperature > 0 and accept_len is None and not (draft and lookup(shape, draft, temperature)[0]):
        fail(f"--temperature {temperature:g}: give --accept-len measured at that temperature (sampling lowers "
             "acceptance; a greedy figure would overstate it), or --draft of a published figure at that temperature")
    if draft == "model" and draft_model is None:
        fail("--draft model is a separate draft model: give its config.json with --draft-model PATH")
    dense = dense_draft(str(draft_model)) if draft_model is not None else None
    if dense is not None:
        draft = "model"
    d = get_draft(draft) if draft else None
    published = None
    if accept_len is None and not (d and d.accept_len):
        published = _published_acceptance(shape, draft or default_draft(shape), depth, topk, use=draft is not None,
                                          temperature=temperature)
    tree = (published.steps, published.topk, published.draft_tokens) if published else (None, None, None)
    own = accept_len is None and d is not None and bool(d.accept_len) and bool(d.depth)  # the draft's figure, at its depth
    at = tree if published else ((d.depth, d.topk or 1, d.depth) if own and d else None)  # where the length was measured
    decay = accept_decay
    if decay is None and (accept_len is not None or (d and d.accept_len) or published):  # a length to match: its curve
        fall = falloff(lookup(shape, draft or default_draft(shape), temperature)[0])
        if fall:
            print(f"acceptance falls with depth: {fall.describe()}; --accept-decay overrides")
        decay = fall.decay if fall else 1.0
    cfg = SynthConfig(requests, positions, depth or (d.depth if d and d.depth else tree[0] or TREE.depth),
                      topk or (d.topk if d and d.topk else tree[1] or TREE.topk), max_nodes or tree[2] or TREE.max_nodes,
                      accept, confidence, gates=gates, seed=seed, draft=draft, draft_model=dense, temperature=temperature,
                      accept_len=accept_len if accept_len is not None else (d.accept_len if d else None) or (published.accept_len if published else None),
                      accept_at=at, accept_decay=1.0 if decay is None else decay, preset=source, **knobs)
    check_synth_size(requests, positions, cfg.max_nodes, shape.num_moe_layers * shape.top_k, gates)
    print("routing knobs: " + ", ".join(f"{k}={v:g}" for k, v in knobs.items()) + f" ({source})")
    if source == "defaults":
        Console(stderr=True).print(f"warning: no routing preset fits {shape.name} ({shape.num_experts} experts, top-{shape.top_k}): "
                                   "routing uses the generator's untuned default knobs (fit one with --calibrate, or --preset)",
                                   highlight=False, soft_wrap=True)
    t0 = time.perf_counter()
    if routing is not None:
        path = write_hybrid(out, shape, cfg, read_routing(routing) if is_routing_dir(routing) else import_routing(routing))
        kind = "hybrid"
    else:
        path = write_synthetic(out, shape, cfg)
        kind = "synthetic"
    m = read_trace(path, validate=False).manifest
    print(f"{path}: {kind} {shape.name} trace, {len(m['requests'])} requests, draft {m['draft']['name']} "
          f"({m['draft']['bytes'] / 1e6:.1f} MB per level, accept {m['draft']['accept']}), {time.perf_counter() - t0:.1f} s")
    if fits is not None:
        print(fits)


def host_fit(shape: object, host: str, dtype: str | None) -> str:
    """One line: the RAM the model's routed experts (cpu-moe) and whole weights (cpu) need on `host`, and whether
    they fit (placements/host_capacity.py)."""
    from ecosim.catalog.dtypes import BITS, at_dtype
    from ecosim.catalog.hosts import load_host
    from ecosim.placements.host_capacity import split

    h = load_host(host)
    if dtype is not None and dtype not in BITS:
        fail(f"--dtype {dtype!r} unknown; known: {', '.join(BITS)}")
    m = at_dtype(shape, dtype) if dtype else shape  # type: ignore[arg-type]
    gpu, experts = split(m, m.num_moe_layers, 0)
    usable = h.ram_bytes * h.memory_fraction
    verdict = lambda need: "fits" if need <= usable else "does not fit"  # noqa: E731
    return (f"host {h.name} ({usable / 1e9:.0f} GB usable): {m.name}'s routed experts need {experts / 1e9:.1f} GB under "
            f"cpu-moe ({verdict(experts)}), the whole model {(gpu + experts) / 1e9:.1f} GB under cpu ({verdict(gpu + experts)})")


def _calibrate(out: Path, model: str, routing: Path, fraction: float, seed: int) -> None:
    """Fit a preset for `model` (default: the routing's own model) to real routing; for a shape
    other than the routing's (experts, top-k), to its moments scaled by shape (routing/scale.py)."""
    if out.exists():
        fail(f"{out}: exists; refusing to overwrite it")
    real = read_routing(routing) if is_routing_dir(routing) else import_routing(routing)
    fit_set, check_set = real.split(fraction, seed) if fraction < 1 else (real, None)
    shape = get_model(model) if model else None
    own, to = RoutingShape(real.num_experts, real.top_k), RoutingShape.of(shape) if shape else None
    scaled = to is not None and (to.num_experts, to.top_k) != (own.num_experts, own.top_k)
    start = scaled_start(preset_knobs(real.model) if in_catalogue(real.model) and shipped_preset(real.model) else START, own, to) if scaled else None
    t0 = time.perf_counter()
    knobs, record = fit(fit_set, seed=seed, shape=to, start=start, progress=lambda s: print(s, flush=True))
    if check_set is not None and len(check_set.seq_len):
        record["check"] = {"sequences": int(len(check_set.seq_len)), "real": moments_plain(check_set)}
    src = real.source.get("credit") or real.source.get("path") or ""
    name = shape.name if shape else real.model
    fitted = f"real routing of {real.model} ({src}), {len(fit_set.seq_len)} of {len(real.seq_len)} sequences (seed {seed})"
    if scaled:
        source = (f"not fitted to {name}'s routing (none at hand): fitted to the moments of the {fitted}, scaled to "
                  f"{name}'s {to.describe()} by keeping the effective tokens of every window (ecosim/routing/scale.py)")
    else:
        source = f"fitted to {fitted}"
    write_preset(out, name, knobs, record, source)
    print(f"{out}: preset fitted in {time.perf_counter() - t0:.0f} s, loss {record['loss']}: "
          + ", ".join(f"{k}={getattr(knobs, k):.3f}" for k in KNOBS))
