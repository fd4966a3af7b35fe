"""`ecosim tune`: the best speculative-decoding setting for a model on a machine, with engine flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ecosim.catalog.drafts import DRAFT_PATH, draft_kind
from ecosim.des import DesConfig
from ecosim.launch import ENGINES, Engine, engine_for, get_engine
from ecosim.cli import app, wide_console
from ecosim.cli.replay import serving_text
from ecosim.cli.options import (
    Bw, Hardware, HardwareArgs, LinkBw, PcieBw, Peak, Placement, cost_config, cost_options, used_text,
)
from ecosim.placements import parse_placement
from ecosim.plots import check_plot, plot_tune
from ecosim.policies.knobs import PREDICTOR
from ecosim.predictors import KINDS, ExpertPredictor, check_name
from ecosim.predictors.kfold import MIN_REQUESTS, KFoldPredictor
from ecosim.predictors.view import request_ids
from ecosim.simulate import cost_model
from ecosim.trace.io import Trace, find_traces, read_trace
from ecosim.trace.schema import provenance_notes
from ecosim.tune import recommend, tune as tune_all
from ecosim.tune_llamacpp import line as llamacpp_line
from ecosim.tune_llamacpp import llamacpp


@app.command()
@cost_options
def tune(
    traces: Annotated[list[Path], typer.Argument(help="Trace directories of the model (or directories holding them).")],
    hardware: Hardware = "h200",
    placement: Placement = "hbm",
    predictor: Annotated[str, typer.Option(help=f"Expert predictor of the adaptive policy: {', '.join(KINDS)} (trained on the fly, k-fold), a predictor file, or oracle (an upper bound).")] = PREDICTOR.default,
    bw: Bw = None,
    peak: Peak = None,
    link_bw: LinkBw = None,
    pcie_bw: PcieBw = None,
    cost: dict[str, str | None] | None = None,
    top: Annotated[int, typer.Option(min=1, help="Candidates listed in the table.")] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Also draw speedup against the tree budget, one line per draft steps, to FILE (.png or .svg; needs matplotlib, in the reports extra).")] = None,
    engine: Annotated[str | None, typer.Option(help=f"Serving engine the recommendation must run on, in its own flags: {', '.join(ENGINES)}; default: the serving profile's engine (llama.cpp where experts live in host RAM, else sglang).")] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, max=1 << 20, help="Tune for N clients, each sending its next request when its last one ends, served with continuous batching: every candidate runs on the event engine (a batch's steps share their expert reads) and the answer adds each request's tokens/s and inter-token latency. Default: one request at a time.")] = None,
) -> None:
    """Recommend a speculative-decoding setting your engine runs: speculation off or one of its static
    trees or chains, in its flags; beside it, the best SGLang tree and vLLM chain, and what the
    adaptive `ecospec-auto` would gain beyond the recommendation if an engine implemented it. Every
    candidate is replayed over all the traces; plain decoding is always one."""
    check_name(predictor)
    check_plot(plot)
    chosen = get_engine(engine) if engine is not None else None
    device = HardwareArgs(hardware, bw, peak, link_bw, pcie_bw).device()
    place = parse_placement(placement)
    config = cost_config(cost)
    found = [read_trace(p, gates=False) for p in find_traces([str(p) for p in traces])]
    given, notes = {}, []
    for t in found:
        cost_model(t, device, place, config)  # a placement that does not fit fails here, before any work
        own = in_sample(t, predictor)
        if own:
            given[t.name] = own
            notes.append(f"{t.name} holds one request: predictor {predictor!r} is fitted in-sample on it (no other "
                         "request to hold out), so the adaptive policy's figures on it are optimistic")
    serve = DesConfig(f"concurrency:{concurrency}", max_batch=concurrency) if concurrency else None
    cands = tune_all(found, lambda t: cost_model(t, device, place, config), predictor, predictors=given, serve=serve)
    first = cost_model(found[0], device, place, config)
    chosen = chosen or engine_for(first.terms.serving, place.host_layers(first.model) is not None)
    draft_doc, path, engine_note = _the_draft(found)
    doc = recommend(cands, chosen, draft_doc, path)
    used = {k: v for k, v in first.applied().items() if k != "draft_time_s"}
    draft: dict[str, float] = doc["draft_time_s"]  # type: ignore[assignment]  # the recommended setting's
    doc = {"hardware": device.name, "placement": str(place), "predictor": predictor, "concurrency": concurrency or 1,
           "traces": [t.name for t in found], "used": {**used, "draft_time_s": draft, "draft_steps": doc["steps"]}, **doc, "notes": notes}
    host = llamacpp(doc, place, first.model, found[0].manifest.get("draft", {}).get("name", "DRAFT"))
    if host is not None:  # experts in host RAM: the llama.cpp / ik_llama.cpp flags (tune_llamacpp.py)
        doc["llama_cpp"] = host
    if plot:
        plot_tune(plot, cands, f"{device.name} {place}: candidates over {len(found)} traces")
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    console = wide_console()
    ar = cands["ar"].time_per_token
    at = f", {concurrency} clients, continuous batching" if concurrency else ""
    t = Table(title=f"{device.name} {place}{at}: candidates by time per token (over {len(found)} traces)", title_justify="left")
    for col in ("candidate", "ms/token", "tokens/step", "speedup vs ar"):
        t.add_column(col, justify="left" if col == "candidate" else "right")
    for name, c in sorted(cands.items(), key=lambda kv: kv[1].time_per_token)[:top]:
        t.add_row(name if c.static else c.name, f"{c.time_per_token * 1e3:.4g}", f"{c.row.tokens_per_step:.3f}",
                  f"{ar / c.time_per_token:.3f}x")
    console.print(t)
    console.print(used_text(used, draft, str(doc["draft_setting"])), markup=False, highlight=False)
    for line in recommendation_lines(doc, chosen, draft_kind(draft_doc)):
        console.print(line, markup=False, highlight=False)
    if "static" in doc:
        s = doc["static"]
        verdict = "" if s["pays"] else "  (slower than plain decoding: do not use)"
        console.print(f"nearest static setting, SGLang: {s['sglang_flags']}  ({s['speedup_vs_ar']:.3f}x plain){verdict}")
    if "vllm" in doc:
        v = doc["vllm"]
        verdict = "" if v["pays"] else "  (slower than plain decoding: do not use)"
        console.print(f"vLLM chain: num_speculative_tokens={v['num_speculative_tokens']}  ({v['speedup_vs_ar']:.3f}x plain){verdict}")
    if host is not None and chosen.name != "llama.cpp":
        console.print(llamacpp_line(host), markup=False, highlight=False)
    for which, per_trace in doc.get("serving", {}).items():  # type: ignore[union-attr]
        for name, metrics in per_trace.items():
            console.print(serving_text(f"{which} ({'recommended' if which == 'best' else 'plain decoding'}) on {name}", metrics),
                          markup=False, highlight=False)
    for note in [*([engine_note] if engine_note else []), *notes, *provenance_notes(t.provenance for t in found)]:
        console.print(f"[yellow]{note}[/yellow]")


def in_sample(trace: Trace, predictor: str) -> dict[str, ExpertPredictor]:
    """The predictor to tune with on a trace too small to hold a request out: a kind trained on the
    fly needs two requests, so on one it is fitted in-sample (the caller says so); {} otherwise."""
    if predictor in KINDS and len(request_ids(trace)) < MIN_REQUESTS:
        return {predictor: KFoldPredictor(predictor, in_sample=True)}
    return {}


def _the_draft(traces: list[Trace]) -> tuple[dict, str | None, str | None]:
    """The traces' draft (its manifest entry), its checkpoint's path where the traces are real recordings
    naming it, and a note when the flags cannot be complete (mixed draft kinds, no recorded path)."""
    drafts = [t.manifest.get("draft") or {} for t in traces]
    kinds = sorted({draft_kind(d) for d in drafts})
    if len(kinds) > 1:
        return drafts[0], None, (f"the traces mix draft kinds ({', '.join(kinds)}): an engine's speculative method depends "
                                 "on it; tune the traces of one draft kind for a complete set of flags")
    real = all(t.provenance == "real" for t in traces)
    path = str(drafts[0].get("source")) if real and drafts[0].get("source") else None
    note = None if path or kinds[0] == "mtp" else f"{DRAFT_PATH}: the path of your draft's checkpoint (these traces do not name a recorded one)"
    return drafts[0], path, note


def recommendation_lines(doc: dict, engine: Engine, kind: str) -> list[str]:
    """The recommendation in the engine's own flags, then the adaptive policy beside it."""
    name = engine.name
    if not doc["speculation_pays"]:
        why = ("every speculative setting it runs is slower here than plain decoding" if doc["runnable"]
               else f"{name} has no speculative mode for a {kind} draft")
        out = [f"recommendation for {name}: speculation off ({why}): {engine.off}"]
    else:
        st = doc["setting"]
        what = (f"a chain of {st['steps']} draft tokens" if st["topk"] == 1 else
                f"a static tree of {st['steps']} draft steps, top-k {st['topk']}, {st['draft_tokens']} tokens verified")
        out = [f"recommendation for {name}: {what}, {doc['speedup_vs_ar']:.3f}x plain decoding: {doc['flags']}"]
    a = doc.get("auto")
    if a is not None:
        out.append(f"beside it, adaptive ecospec-auto: {a['gain_over_best']:.3f}x the recommendation's speed at {a['steps']} "
                   f"draft steps ({a['speedup_vs_ar']:.3f}x plain; ecosim --draft-steps {a['steps']}): what an engine "
                   "implementing it would gain; no engine runs it today")
    return out
