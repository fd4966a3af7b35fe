"""summary.json and summary.md: every figure of the device check, rewritten after every phase.

summary.json:
- `passed`: every phase passed; `environment`: device, versions, memory (phase 1);
- `phases`: one entry per (phase, target): status (passed, failed, skipped), seconds, and `why`
  for a failure or a skip (one line);
- `targets[name]`: `shape` (the built target's layers, experts, top-k, bytes per expert), `plan`
  (the sizes the budget allowed, plan.py), `record` (requests, positions, the format check),
  `recompute` (nodes recomputed by plain decoding; how many agree on the next token and on the
  routing; the largest log-prob difference), `calibrate` (the fit: bandwidth bytes/s, compute
  FLOP/s, overhead and draft seconds, rms and worst relative error; `steps`: eager and CUDA-graph
  ms of one verify step against tokens and distinct experts), `run` (lossless, per policy measured
  and simulated ms per token and the signed error in percent, mean and worst absolute error).
summary.md says the same for a reader.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

SCHEMA, VERSION = "validate-device-check", 1


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


class Summary:
    """The check's record, phase by phase; `write` puts it in OUT/summary.{json,md}."""

    def __init__(self, out: Path, config: dict[str, Any], command: str):
        self.out = out
        self.doc: dict[str, Any] = {"schema": SCHEMA, "version": VERSION, "command": command, "config": config,
                                    "passed": False, "environment": None, "phases": [], "targets": {}}
        self.t0 = time.perf_counter()

    def target(self, name: str) -> dict[str, Any]:
        return self.doc["targets"].setdefault(name, {})

    def failed(self, target: str | None = None) -> bool:
        return any(p["status"] != "passed" for p in self.doc["phases"] if target is None or p["target"] == target)

    def skip(self, phase: str, target: str | None, why: str) -> None:
        self.doc["phases"].append({"phase": phase, "target": target, "status": "skipped", "seconds": 0.0, "why": why})
        self.write()

    @contextmanager
    def phase(self, phase: str, target: str | None = None) -> Iterator[dict[str, Any]]:
        """Time a phase; an exception marks it failed (one line) and is not raised further,
        except Ctrl-C; the summary is rewritten either way."""
        entry: dict[str, Any] = {"phase": phase, "target": target, "status": "running", "seconds": 0.0}
        self.doc["phases"].append(entry)
        t0 = time.perf_counter()
        try:
            yield entry
            if entry["status"] == "running":
                entry["status"] = "passed"
        except KeyboardInterrupt:
            entry.update(status="failed", why="interrupted")
            raise
        except Exception as e:  # noqa: BLE001  (a failed phase is recorded; the check goes on where it can)
            entry.update(status="failed", why=_one_line(e))
        finally:
            entry["seconds"] = round(time.perf_counter() - t0, 3)
            self.write()

    def write(self) -> None:
        self.doc["elapsed_s"] = round(time.perf_counter() - self.t0, 3)
        self.doc["passed"] = bool(self.doc["phases"]) and not self.failed()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        (self.out / "summary.md").write_text(markdown(self.doc))


def _f(x: Any, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(doc: dict[str, Any]) -> str:
    """The summary for a reader: environment, phases, then each target's figures."""
    env = doc.get("environment") or {}
    lines = [f"# Device check: {'PASSED' if doc['passed'] else 'NOT PASSED'}", "",
             f"`{doc['command']}`, {doc.get('elapsed_s', 0):.1f} s of a {doc['config'].get('budget_s')} s budget.", ""]
    if env:
        lines += [f"Device: {env.get('device')} ({env.get('device_kind')}), torch {env.get('torch')} (CUDA "
                  f"{env.get('torch_cuda')}), transformers {env.get('transformers')}, Python {env.get('python')}.", ""]
    lines += ["| phase | target | status | seconds | why |", "|---|---|---|---:|---|"]
    for p in doc["phases"]:
        lines.append(f"| {p['phase']} | {p['target'] or '-'} | {p['status']} | {p['seconds']:.1f} | {p.get('why', '')} |")
    for name, t in doc["targets"].items():
        lines += ["", f"## {name}", ""]
        s = t.get("shape")
        if s:
            lines.append(f"Built: {s['family']}, {s['num_layers']} layers, {s['num_experts']} experts top-{s['top_k']}, "
                         f"hidden {s['hidden_size']}, expert width {s['moe_intermediate_size']}, "
                         f"{s['expert_bytes'] / 1e6:.2f} MB per expert, random weights.")
        r = t.get("record")
        if r:
            lines.append(f"Trace: {r['requests']} requests, {r['positions']} positions, format check {r['check']}.")
        c = t.get("recompute")
        if c:
            lines.append(f"Tree verification vs plain decoding on {c['nodes']} sampled nodes: next token equal "
                         f"{c['target_next_equal']}/{c['nodes']}, routing equal {c['experts_equal']}/{c['nodes']}, "
                         f"largest log-prob difference {c['max_logprob_diff']:.2g}.")
        cal = t.get("calibrate")
        if cal:
            f = cal["fit"]
            lines += ["", f"Calibration ({cal['cases']} cases, overlap {f['overlap']}): bandwidth {_f(f['bw'] / 1e9)} GB/s, "
                      f"compute {_f(f['peak'] / 1e12)} TFLOP/s, overhead {_f(f['overhead_s'] * 1e3)} ms, draft "
                      f"{_f(f['draft_time_s'] * 1e3)} ms per step; rms error {f['rel_rmse'] * 100:.1f}%, worst "
                      f"{f['max_rel_err'] * 100:.1f}%.", "",
                      "| tokens | experts | eager ms | CUDA graph ms | graph's experts implementation |",
                      "|---:|---:|---:|---:|---|"]
            for row in cal["steps"]:
                lines.append(f"| {row['tokens']} | {row['experts']} | {row['eager_ms']:.3g} | {_f(row['graph_ms'])} | "
                             f"{row['graph_experts_implementation'] or '-'} |")
            for n in cal.get("graph_notes", []):
                lines.append(f"\n{n}")
        run = t.get("run")
        if run:
            lines += ["", f"Lossless: {'yes' if run['lossless'] else 'NO'}; mean absolute error {run['mae_pct']:.2f}%, "
                      f"worst {run['worst_pct']:.2f}%, ranking preserved: {'yes' if run['ranking_preserved'] else 'no'}.", "",
                      "| policy | measured ms/token | simulated ms/token | error |", "|---|---:|---:|---:|"]
            for p in run["policies"]:
                lines.append(f"| {p['label']} | {p['measured_ms_per_token']:.4g} | {p['simulated_ms_per_token']:.4g} | "
                             f"{p['error_pct']:+.2f}% |")
    return "\n".join(lines) + "\n"
