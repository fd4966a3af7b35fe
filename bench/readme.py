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
            for p in ("ar", "confidence", "ecospec", "ecospec_lam0.1", "oracle"):
                b = f"replay.{s}.{p}"
                if f"{b}.warm_ratio" not in figs:
                    continue
                label = {"ecospec": "ecospec b16 λ0.5", "ecospec_lam0.1": "ecospec b16 λ0.1", "confidence": "confidence b16"}.get(p, p)
                tgt = figs[f"{b}.warm_ratio"]["target"].split()[1]
                out.append(f"| {s} | {label} | {_f(figs[f'{b}.warm_pos_per_s']['value'])} | {figs[f'{b}.warm_ratio']['value']:.3f} "
                           f"| {figs[f'{b}.cold_ratio']['value']:.3f} | ≥ {tgt} | {met(f'{b}.warm_ratio')} | {met(f'{b}.cold_ratio')} |")
        out.append("")

    rows = []
    for k, f in figs.items():
        if k.split(".")[0] in ("engines", "sweep", "sweep1000", "tracer", "memory"):
            note = f["note"].replace("|", "\\|")
            rows.append(f"| `{k}` | {_f(f['value'], 4)} {f['unit']} | {f['target'] or ''} | {met(k)} | {note} |")
    if rows:
        out += ["| figure | value | target | | what |", "|---|---:|---|---|---|", *rows, ""]

    traces = [k[len("quality.") : -len(".ar_ms_per_token")] for k in figs if k.startswith("quality.") and k.endswith(".ar_ms_per_token")]
    if traces:
        out += ["| trace | ar ms/token | confidence best | ecospec best | oracle bound | ecospec / confidence | "
                "ecospec of bound | confidence of bound |", "|---|---:|---|---|---:|---:|---:|---:|"]
        for t in traces:
            b = f"quality.{t}"
            c, e = figs[f"{b}.confidence_best_ms_per_token"], figs[f"{b}.ecospec_best_ms_per_token"]
            kind = "real" if "real" in figs[f"{b}.ar_ms_per_token"]["note"] else "synthetic"
            out.append(f"| {t} ({kind}) | {_f(figs[f'{b}.ar_ms_per_token']['value'], 4)} | {_f(c['value'], 4)} ({c['note']}) "
                       f"| {_f(e['value'], 4)} ({e['note']}) | {_f(figs[f'{b}.oracle_ms_per_token']['value'], 4)} "
                       f"| {figs[f'{b}.ecospec_over_confidence']['value']:.3f}x | {figs[f'{b}.ecospec_of_oracle']['value']:.3f} "
                       f"| {figs[f'{b}.confidence_of_oracle']['value']:.3f} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
