"""`ecosim tune`: the best speculative-decoding setting for a model on a machine, with engine flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ecosim.catalog.drafts import DRAFT_PATH, draft_kind, sglang_draft_flags
from ecosim.cli import app, wide_console
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
) -> None:
    """Recommend a speculative-decoding setting: speculation off, a static tree (SGLang flags; vLLM's
    chain), or the adaptive `ecospec-auto`, and what the adaptive policy gains beyond the
    best static tree. Every candidate is replayed over all the traces; plain decoding is always one."""
    check_name(predictor)
    check_plot(plot)
    device = HardwareArgs(hardware, bw, peak, link_bw, pcie_bw).device()
    place = parse_placement(placement)
    config = cost_config(cost)
    found = [read_trace(p) for p in find_traces([str(p) for p in traces])]
    given, notes = {}, []
    for t in found:
        cost_model(t, device, place, config)  # a placement that does not fit fails here, before any work
        own = in_sample(t, predictor)
        if own:
            given[t.name] = own
            notes.append(f"{t.name} holds one request: predictor {predictor!r} is fitted in-sample on it (no other "
                         "request to hold out), so the adaptive policy's figures on it are optimistic")
    cands = tune_all(found, lambda t: cost_model(t, device, place, config), predictor, predictors=given)
    doc = recommend(cands)
    used = {k: v for k, v in cost_model(found[0], device, place, config).applied().items() if k != "draft_time_s"}
    draft: dict[str, float] = doc["draft_time_s"]  # type: ignore[assignment]  # the recommended setting's
    doc = {"hardware": device.name, "placement": str(place), "predictor": predictor,
           "traces": [t.name for t in found], "used": {**used, "draft_time_s": draft, "draft_steps": doc["steps"]}, **doc, "notes": notes}
    engine = llamacpp(doc, place, cost_model(found[0], device, place, config).model,
                      found[0].manifest.get("draft", {}).get("name", "DRAFT"))
    if engine is not None:  # experts in host RAM: the llama.cpp / ik_llama.cpp flags (tune_llamacpp.py)
        doc["llama_cpp"] = engine
    engine_note = _draft_flags(doc, found)
    if plot:
        plot_tune(plot, cands, f"{device.name} {place}: candidates over {len(found)} traces")
    if as_json:
        print(json.dumps(doc, indent=1))
        return
    console = wide_console()
    ar = cands["ar"].time_per_token
    t = Table(title=f"{device.name} {place}: candidates by time per token (over {len(found)} traces)", title_justify="left")
    for col in ("candidate", "ms/token", "tokens/step", "speedup vs ar"):
        t.add_column(col, justify="left" if col == "candidate" else "right")
    for name, c in sorted(cands.items(), key=lambda kv: kv[1].time_per_token)[:top]:
        t.add_row(name if c.static else c.name, f"{c.time_per_token * 1e3:.4g}", f"{c.row.tokens_per_step:.3f}",
                  f"{ar / c.time_per_token:.3f}x")
    console.print(t)
    console.print(used_text(used, draft, str(doc["draft_setting"])), markup=False, highlight=False)
    if not doc["speculation_pays"]:
        console.print("[bold]recommendation: speculation off[/bold] (every speculative setting here is slower than plain "
                      "decoding): serve without --speculative-algorithm / speculative_config")
    elif doc["best"] == "static":
        console.print(f"[bold]recommendation: a static tree[/bold] of {doc['steps']} draft steps, {doc['speedup_vs_ar']:.3f}x plain decoding")
    else:
        console.print(f"[bold]recommendation: {doc['best']}[/bold] (ecosim --draft-steps {doc['steps']}), "
                      f"{doc['speedup_vs_ar']:.3f}x plain decoding")
    if "static" in doc:
        s = doc["static"]
        verdict = "" if s["pays"] else "  (slower than plain decoding: do not use)"
        console.print(f"nearest static setting, SGLang: {s['sglang_flags']}  ({s['speedup_vs_ar']:.3f}x plain){verdict}")
        if "auto_gain_over_static" in doc:
            console.print(f"adaptive ecospec-auto beyond it: {doc['auto_gain_over_static']:.3f}x at {doc['auto']['steps']} draft "
                          f"steps (ecosim --draft-steps {doc['auto']['steps']}; its root-only steps assume the engine can skip "
                          "drafting; no engine flag realises it today)")
    if "vllm" in doc:
        v = doc["vllm"]
        verdict = "" if v["pays"] else "  (slower than plain decoding: do not use)"
        console.print(f"vLLM chain: num_speculative_tokens={v['num_speculative_tokens']}  ({v['speedup_vs_ar']:.3f}x plain){verdict}")
    if engine is not None:
        console.print(llamacpp_line(engine), markup=False, highlight=False)
    for note in [*([engine_note] if engine_note else []), *notes, *provenance_notes(t.provenance for t in found)]:
        console.print(f"[yellow]{note}[/yellow]")


def in_sample(trace: Trace, predictor: str) -> dict[str, ExpertPredictor]:
    """The predictor to tune with on a trace too small to hold a request out: a kind trained on the
    fly needs two requests, so on one it is fitted in-sample (the caller says so); {} otherwise."""
    if predictor in KINDS and len(request_ids(trace)) < MIN_REQUESTS:
        return {predictor: KFoldPredictor(predictor, in_sample=True)}
    return {}


def _draft_flags(doc: dict, traces: list[Trace]) -> str | None:
    """Put SGLang's draft flags (the algorithm for the traces' draft kind, the draft's path) in front
    of the static tree's, so the printed set pastes into a launch command; a note when it cannot."""
    if "static" not in doc:
        return None
    drafts = [t.manifest.get("draft") or {} for t in traces]
    kinds = sorted({draft_kind(d) for d in drafts})
    if len(kinds) > 1:
        return (f"the traces mix draft kinds ({', '.join(kinds)}): SGLang's --speculative-algorithm depends on it; "
                "tune the traces of one draft kind for a complete set of flags")
    real = all(t.provenance == "real" for t in traces)
    path = str(drafts[0].get("source")) if real and drafts[0].get("source") else None
    flags = sglang_draft_flags(drafts[0], path)
    if flags is None:
        return f"SGLang has no speculative algorithm for a {kinds[0]} draft: the tree flags alone do not launch it"
    static = doc["static"]
    static["sglang_draft_flags"] = flags
    static["sglang_flags"] = f"{flags} {static['sglang_flags']}"
    if DRAFT_PATH in flags:
        return f"{DRAFT_PATH}: the path of your draft's checkpoint (these traces do not name a recorded one)"
    return None
