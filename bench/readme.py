"""Render a `bench/run --json` file as the README's benchmark tables (Markdown, to stdout).

    python -m bench.readme bench/latest.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(x: float, digits: int = 3) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def render(doc: dict) -> str:
    figs = {f"{f['bench']}.{f['name']}": f for f in doc["figures"]}
    out: list[str] = []

    def met(name: str) -> str:
        f = figs.get(name)
        return "" if f is None or f["met"] is None else ("met" if f["met"] else "**missed**")

    shapes = [k[len("replay.") : -len(".positions")] for k in figs if k.startswith("replay.") and k.endswith(".positions")]
    if shapes:
        out += ["| shape | policy | warm positions/s | warm ratio | cold ratio | target | warm | cold |",
                "|---|---|---:|---:|---:|---:|---|---|"]
        for s in shapes:
            n = figs[f"replay.{s}.numpy_pass_pos_per_s"]["value"]
            out.append(f"| {s} | numpy pass | {_f(n)} | 1 | | | | |")
            for p in ("ar", "confidence", "ecospec", "ecospec_lam0.1", "ecospec_auto", "oracle"):
                b = f"replay.{s}.{p}"
                if f"{b}.warm_ratio" not in figs:
                    continue
                label = {"ecospec": "ecospec b16 λ0.5", "ecospec_lam0.1": "ecospec b16 λ0.1", "confidence": "confidence b16", "ecospec_auto": "ecospec --lambda auto"}.get(p, p)
                tgt = figs[f"{b}.warm_ratio"]["target"].split()[1]
                out.append(f"| {s} | {label} | {_f(figs[f'{b}.warm_pos_per_s']['value'])} | {figs[f'{b}.warm_ratio']['value']:.3f} "
                           f"| {figs[f'{b}.cold_ratio']['value']:.3f} | ≥ {tgt} | {met(f'{b}.warm_ratio')} | {met(f'{b}.cold_ratio')} |")
        out.append("")

    if "speed.union_pass_s" in figs:
        out += _speed(figs, met)

    rows = []
    for k, f in figs.items():
        if k.split(".")[0] in ("engines", "sweep", "sweep1000", "tracer", "memory") and not (
                "speed.union_pass_s" in figs and k in SPEED_TABLE):  # shown once, in the speed table
            note = f["note"].replace("|", "\\|")
            rows.append(f"| `{k}` | {_f(f['value'], 4)} {f['unit']} | {f['target'] or ''} | {met(k)} | {note} |")
    if rows:
        out += ["| figure | value | target | | what |", "|---|---:|---|---|---|", *rows, ""]

    configs = [k[len("quality.") : -len(".ar_ms_per_token")] for k in figs
               if k.startswith("quality.") and not k.startswith("quality.host.") and k.endswith(".ar_ms_per_token")]
    if configs:
        out += ["| trace, device, placement | ar | confidence best | ecospec best (tuned) | auto (untuned) | reference | "
                "oracle | eagle2-default | auto / confidence | auto / confidence (cv) | auto / eagle2 | confidence / eagle2 | "
                "auto of reference | auto of bound |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        per_kind: dict[str, list[tuple[float, float]]] = {}
        for c in configs:
            b = f"quality.{c}"
            ms = lambda k: _f(figs[f"{b}.{k}_ms_per_token"]["value"], 4)  # noqa: E731
            note = lambda k: figs[f"{b}.{k}_ms_per_token"]["note"]  # noqa: E731
            kind = note("ar").split(",")[0]  # real, hybrid or synthetic: the note starts with the provenance
            out.append(f"| {c} ({kind}) | {ms('ar')} | {ms('confidence_best')} ({note('confidence_best')}) "
                       f"| {ms('ecospec_best')} ({note('ecospec_best')}) | {ms('auto')} | {ms('reference')} | {ms('oracle')} "
                       f"| {ms('eagle2_default')} | {figs[f'{b}.auto_over_confidence']['value']:.3f}x "
                       f"| {figs[f'{b}.auto_over_confidence_cv']['value']:.3f}x "
                       f"| {figs[f'{b}.auto_over_eagle2']['value']:.3f}x | {figs[f'{b}.confidence_over_eagle2']['value']:.3f}x "
                       f"| {figs[f'{b}.auto_of_reference']['value']:.3f} | {figs[f'{b}.auto_of_oracle']['value']:.3f} |")
            per_kind.setdefault(kind, []).append((1 / figs[f"{b}.auto_over_confidence"]["value"],
                                                  1 / figs[f"{b}.auto_over_confidence_cv"]["value"]))
        out.append("")
        out += ["| traces | configurations | auto time / confidence best: mean | worst | > 1.03x | "
                "auto time / confidence (cv): mean | worst | > 1.03x |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for kind, xs in per_kind.items():
            h, c = [x[0] for x in xs], [x[1] for x in xs]
            out.append(f"| {kind} | {len(xs)} | {sum(h) / len(h):.3f}x | {max(h):.3f}x | {sum(x > 1.03 for x in h)} "
                       f"| {sum(c) / len(c):.3f}x | {max(c):.3f}x | {sum(x > 1.03 for x in c)} |")
        out.append("")
    out += host_tables(figs)
    return "\n".join(out)


def host_tables(figs: dict) -> list[str]:
    """The quality-host bench (bench/quality_host.py): one row per configuration, then the means per engine."""
    configs = [k[len("quality.host.") : -len(".ar_ms_per_token")] for k in figs
               if k.startswith("quality.host.") and k.endswith(".ar_ms_per_token")]
    if not configs:
        return []
    out = ["| trace, host, placement, engine | ar | confidence best | auto (untuned) | llama.cpp chain | reference "
           "| auto / confidence | auto / ar | auto of reference |", "|---|---:|---|---:|---|---:|---:|---:|---:|"]
    for c in configs:
        b = f"quality.host.{c}"
        ms = lambda k: _f(figs[f"{b}.{k}_ms_per_token"]["value"], 4)  # noqa: E731
        note = lambda k: figs[f"{b}.{k}_ms_per_token"]["note"]  # noqa: E731
        kind = note("ar").split(",")[0]
        out.append(f"| {c} ({kind}) | {ms('ar')} | {ms('confidence_best')} ({note('confidence_best')}) | {ms('auto')} "
                   f"| {ms('llamacpp_default')} ({note('llamacpp_default').split(' (')[0]}) | {ms('reference')} "
                   f"| {figs[f'{b}.auto_over_confidence']['value']:.3f}x | {figs[f'{b}.auto_over_ar']['value']:.3f}x "
                   f"| {figs[f'{b}.auto_of_reference']['value']:.3f} |")
    out.append("")
    means = sorted({k[len("quality.host.mean.") :].rsplit(".", 1)[0] for k in figs if k.startswith("quality.host.mean.")})
    if means:
        out += ["| engine | configurations | auto / confidence best: mean (target >= 1.15) | auto / ar: worst (>= 1) "
                "| auto of reference: worst (>= 0.9) | confidence best / ar: mean | auto / llama.cpp chain: mean |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for e in means:
            g = lambda k: figs[f"quality.host.mean.{e}.{k}"]  # noqa: E731
            mark = lambda k: "" if g(k)["met"] is None else (" (met)" if g(k)["met"] else " (**missed**)")  # noqa: E731
            out.append(f"| {e} | {g('auto_over_confidence')['note'].split()[1]} | {g('auto_over_confidence')['value']:.3f}x{mark('auto_over_confidence')} "
                       f"| {g('auto_over_ar_min')['value']:.3f}x{mark('auto_over_ar_min')} "
                       f"| {g('auto_of_reference_min')['value']:.3f}{mark('auto_of_reference_min')} "
                       f"| {g('confidence_over_ar')['value']:.3f}x | {g('auto_over_llamacpp')['value']:.3f}x |")
        out.append("")
    return out


SPEED_TABLE = ("speed.wide.evict_over_confidence", "speed.wide.evict_over_union", "speed.baseline_mb",
               "speed.all_policy_peak_mb", "speed.beyond_baseline_over_disk", "speed.fixed_mb", "engines.des_over_fast",
               "engines.des_events_over_fast")


def _speed(figs: dict, met) -> list[str]:
    """bench/speed.py's figures: each policy cold, warm and called again, over the union pass."""
    labels = {"ar": "ar", "confidence": "confidence b16", "ecospec": "ecospec b16 λ0.5 token",
              "ecospec_oracle": "ecospec b16 λ0.5 oracle", "ecospec_auto": "ecospec-auto token", "evict": "evict",
              "oracle": "oracle"}
    floor = figs["speed.union_pass_s"]
    out = [f"Union pass: {floor['value'] * 1e3:.0f} ms ({floor['note']}).", "",
           "| policy | cold / union pass | warm / union pass | `ecosim.replay` again / union pass | target (warm, cold) "
           "| warm | cold |", "|---|---:|---:|---:|---|---|---|"]
    for p, label in labels.items():
        b = f"speed.{p}"
        if f"{b}.cold_over_union" not in figs:
            continue
        c, w = figs[f"{b}.cold_over_union"], figs[f"{b}.warm_over_union"]
        a = figs.get(f"{b}.api_repeat_over_union")
        again = "" if a is None else f"{a['value']:.2f}"
        target = f"≤ {w['target'].split()[1]}, ≤ {c['target'].split()[1]}" if c["target"] else ""
        out.append(f"| {label} | {c['value']:.2f} ({c['note']}) | {w['value']:.2f} ({w['note']}) "
                   f"| {again} | {target} | {met(f'{b}.warm_over_union')} "
                   f"| {met(f'{b}.cold_over_union')} |")
    out.append("")
    out += ["| figure | value | target | | what |", "|---|---:|---|---|---|"]
    for k in SPEED_TABLE:
        if k in figs:
            f = figs[k]
            out.append(f"| `{k}` | {_f(f['value'], 4)} {f['unit']} | {f['target'] or ''} | {met(k)} | {f['note']} |")
    out.append("")
    return out


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
