"""`validate report`: the comparison as a table, and the lines that say whether the targets are met."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.4g}"


def _f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _plain(doc: dict[str, Any]) -> str:
    d = doc.get("decoding") or {"mode": "greedy"}
    return "greedy" if d.get("mode") != "sample" else f"sampled (T={d['temperature']:g}, seed {d['seed']}, target-only)"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def table(doc: dict[str, Any]) -> Table:
    clock = (doc.get("measured_environment") or {}).get("clock", "wall")
    t = Table(title=f"{doc['model']} on {doc['device']}: measured ({clock} clock) vs simulated (trace {doc['trace']})",
              title_justify="left")
    cols = [("policy", "left"), ("tok/step", "right"), ("sim tok/step", "right"), ("exp/step", "right"), ("sim exp/step", "right"),
            ("ms/tok", "right"), ("sim ms/tok", "right"), ("error", "right"), ("step-model", "right"),
            ("vs ar", "right"), ("sim vs ar", "right"), ("draft ms", "right"), ("select ms", "right"), ("verify ms", "right")]
    for c, j in cols:
        t.add_column(c, justify=j, no_wrap=True)  # type: ignore[arg-type]
    for p in doc["policies"]:
        t.add_row(
            p["label"], f"{p['tokens_per_step']:.3f}", _f3(p.get("simulated_tokens_per_step")), f"{p['experts_per_step']:.1f}", f"{p['simulated_experts_per_step']:.1f}",
            _ms(p["measured_time_per_token_s"]), _ms(p["simulated_time_per_token_s"]),
            f"{p['error_pct']:+.2f}%", f"{p['step_model_error_pct']:+.2f}%",
            _x(p["measured_speedup_vs_ar"]), _x(p["simulated_speedup_vs_ar"]),
            _ms(p["draft_s"]), _ms(p["select_s"]), _ms(p["verify_s"]),
        )
    t.caption = ("each figure measured, then its simulated counterpart (sim ...: the simulator's replay of the recorded "
                 "trace); error: sim ms/tok vs ms/tok; step-model: the cost model on the measured steps; draft/select/"
                 "verify: mean measured ms per step")
    t.caption_justify = "left"
    return t


def lines(doc: dict[str, Any]) -> list[str]:
    out = []
    clock = (doc.get("measured_environment") or {}).get("clock", "wall")
    if doc["lossless"]:
        out.append(f"lossless: yes (every policy's tokens equal plain {_plain(doc)} decoding's)")
    else:
        f = doc["lossless_failures"][0]
        out.append(f"lossless: NO: {f['policy']} request {f['request']} diverges from {_plain(doc)} decoding at position "
                   f"{f['position']} (expected {f['expected']}, got {f['got']}); {len(doc['lossless_failures'])} failure(s)")
    tg = doc["targets"]
    ok = lambda b: "met" if b else "MISSED"  # noqa: E731
    out.append(f"mean absolute error {doc['mae_pct']:.2f}% (target <= {tg['mae_pct']['target']:g}%: {ok(tg['mae_pct']['met'])}); "
               f"worst {doc['worst_pct']:.2f}% (target <= {tg['worst_pct']['target']:g}%: {ok(tg['worst_pct']['met'])})")
    acc = tg.get("accepted_length_pct")
    if acc is not None:
        per = ", ".join(f"{p['label']} {p['tokens_per_step']:.3f} vs {p['simulated_tokens_per_step']:.3f}"
                        for p in doc["policies"] if "simulated_tokens_per_step" in p)
        out.append(f"accepted length (tokens per step, measured vs simulated): {per}; worst error {acc['value']:.2f}% "
                   f"(target <= {acc['target']:g}%: {ok(acc['met'])})")
    out.append(f"ranking preserved: {'yes' if doc['ranking_preserved'] else 'NO'} (measured: {', '.join(doc['ranking_measured'])}; "
               f"simulated: {', '.join(doc['ranking_simulated'])})")
    m = doc.get("winner_margin")
    if m:
        out.append(f"winner {m['winner']} vs {m['versus']}: measured {m['measured_pct']:+.2f}%, simulated {m['simulated_pct']:+.2f}% "
                   f"faster (margin error {m['margin_error_pp']:+.2f} pp); winner faster in measured "
                   f"{'wall-clock' if clock == 'wall' else clock + '-clock'} time: {'yes' if m['winner_faster_measured'] else 'NO'}")
    r = doc.get("profile_drift")
    if r:
        out.append(f"profile: {r['given']} refitted on its cases of up to {r['most_tokens']} tokens and re-timed at this "
                   f"run's pace ({r['anchor_runs']} verify and {r['anchor_drafts']} draft runs between the decoding rounds): "
                   f"verify x{r['verify_factor']:.3f}, draft x{r['draft_factor']:.3f}")
    d = doc.get("draft_step")
    if d:
        out.append(f"draft step: {d['measured_s'] * 1e3:.1f} ms measured (mean over the speculative policies' steps), "
                   f"{d['profile_s'] * 1e3:.1f} ms charged by the profile")
    for w in doc.get("warnings", []):
        out.append(f"warning: {w}")
    out.append("not modelled: " + "; ".join(doc["not_modelled"]))
    return out


def render(doc: dict[str, Any], console: Console) -> None:
    console.print(table(doc))
    for line in lines(doc):
        console.print(line, markup=False, highlight=False)
