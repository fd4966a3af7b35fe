"""What every benchmark shares: the figure record, the synthetic- and hybrid-trace cache, timers, peak RSS."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ecosim.routing.presets import preset_hash

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("deepseek-v3.1", "qwen3-235b-a22b", "gpt-oss-120b")  # the synthetic shapes the benchmarks measure: the largest of each family
# Real gpt-oss-20b routing (AmanPriyanshu/GPT-OSS-MoE-ExpertFingerprinting, Apache-2.0), beside the
# repository in this workplace; absent on a clean clone (the hybrid trace is then skipped, said so).
ROUTING = ROOT.parent / "shared" / "data" / "gpt-oss-20b-routing"
HYBRID_MODEL = "gpt-oss-20b"


@dataclass
class Figure:
    """One number a benchmark reports. `target` is a comparison such as `>= 0.333` on `value`."""

    bench: str
    name: str
    value: float
    unit: str = ""
    target: str | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, bound = self.target.split()
        return {">=": self.value >= float(bound), "<=": self.value <= float(bound), "<": self.value < float(bound),
                ">": self.value > float(bound), "==": self.value == float(bound)}[op]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


@dataclass
class Report:
    """The figures of one `bench/run`, in the order they were measured."""

    meta: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # bench -> why it did not run

    def add(self, bench: str, name: str, value: float, unit: str = "", target: str | None = None, note: str = "") -> float:
        fig = Figure(bench, name, float(value), unit, target, note)
        self.figures.append(fig)
        met = "" if fig.met is None else ("  [target " + fig.target + (": met]" if fig.met else ": MISSED]"))
        print(f"  {bench}.{name} = {_fmt(fig.value)} {unit}{met}{'  (' + note + ')' if note else ''}", flush=True)
        return fig.value

    def to_json(self) -> str:
        return json.dumps({"meta": self.meta, "figures": [f.to_dict() for f in self.figures], "skipped": self.skipped},
                          indent=1, allow_nan=True)


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"
    return f"{x:.3g}"


def synthetic(cache: Path, model: str, requests: int, positions: int, max_nodes: int = 60, seed: int = 0,
              extra: tuple[str, ...] = ()) -> Path:
    """A synthetic trace of `model`'s shape with its shipped routing preset (`ecosim synth`), generated
    once into `cache` and reused; the cache key holds the preset's hash, so a refitted preset regenerates.
    `extra`: more `ecosim synth` options (in the key too)."""
    more = "".join(f"-{a.lstrip('-')}" for a in extra)
    d = cache / f"{model}-r{requests}-p{positions}-n{max_nodes}-s{seed}{more}-preset{preset_hash(model)}"
    return _generate(d, ["--model", model, "--requests", str(requests), "--positions", str(positions),
                         "--max-nodes", str(max_nodes), "--seed", str(seed), *extra])


def hybrid(cache: Path, routing: Path, requests: int, positions: int, max_nodes: int = 60, seed: int = 0) -> Path:
    """A hybrid gpt-oss-20b trace (`ecosim synth --routing`): the first `requests` real answers of
    `routing` as the continuation, draft trees and rejected branches from the shipped preset. Cached
    like `synthetic`, keyed also by the routing set (its files' sizes and mtimes)."""
    ident = ",".join(f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in sorted(routing.iterdir()) if p.is_file())
    key = hashlib.sha256(ident.encode()).hexdigest()[:8]
    d = cache / f"hybrid-{HYBRID_MODEL}-r{requests}-p{positions}-n{max_nodes}-s{seed}-preset{preset_hash(HYBRID_MODEL)}-routing{key}"
    return _generate(d, ["--model", HYBRID_MODEL, "--routing", str(routing), "--requests", str(requests),
                         "--positions", str(positions), "--max-nodes", str(max_nodes), "--seed", str(seed)])


def _generate(d: Path, args: list[str]) -> Path:
    if not (d / "manifest.json").is_file():
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ecosim.cli", "synth", str(d), *args, "--force"], check=True, stdout=subprocess.DEVNULL)
        print(f"  (generated {d.name} in {time.perf_counter() - t0:.0f} s; cached for later runs)", flush=True)
    return d


def best_of(n: int, fn: Callable[[], object], before: Callable[[], object] | None = None) -> float:
    """Least wall seconds of `n` calls of `fn` (`before` runs untimed ahead of each)."""
    best = math.inf
    for _ in range(n):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def peak_rss(args: list[str], parse: bool = True) -> tuple[float, dict[str, Any]]:
    """Run `ecosim ARGS` in a fresh child that reports its own peak RSS: (bytes, its JSON output,
    or {} when not `parse`).

    VmHWM (not ru_maxrss, which Linux carries across exec from the parent) is the child's own peak.
    """
    code = (
        "import sys; from ecosim.cli import main; rc = main(sys.argv[1:]); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]; "
        "print(hwm, file=sys.stderr); sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ecosim {' '.join(args)} failed: {out.stderr.strip()[-500:]}")
    return float(out.stderr.strip().splitlines()[-1]) * 1024.0, json.loads(out.stdout) if parse else {}
