"""Policy quality with the experts in host memory: the paper's question where scattered expert reads dominate.

The quality bench's synthetic DeepSeek-V3.1, Qwen3-235B and GPT-OSS-120B traces and its hybrid gpt-oss-20b
trace (real routing as the continuation), priced with the routed experts in host RAM on the CPU (`cpu-moe`:
attention, dense layers and the draft on one GPU, as KTransformers and llama.cpp `--cpu-moe` run them) and with the
whole model on the CPU (`cpu`), on the catalogue hosts (catalog/data/hosts), each where it fits: DeepSeek-V3.1 and
Qwen3-235B at GGUF q4_k_m, the gpt-oss models at their own mxfp4. Two engines (serving profiles fitted by ecosim
fidelity): `ktransformers`, fitted on KTransformers' DeepSeek-V3 rows (0.72 ms per host layer beyond its bytes:
a fixed cost per step, as on a GPU), and `ik_llama.cpp`, fitted on ik_llama.cpp's one-token GLM-4.5-Air row (no
per-layer cost: a step is its bytes), the two ends of what engines spend beside the expert reads.

Per configuration, ms per generated token: `ar`; `confidence_best`, the least over budgets (BUDGETS and the
whole tree; hindsight, biased low); `auto`, `ecospec-auto` untuned with the token predictor; `llamacpp_default`,
llama.cpp's speculation, a chain of `--draft-max` tokens (its default 16, cut to the recorded depth); and
`reference`, the same auto policy told the true routing (the achievable reference). Ratios: `auto_over_confidence`
(target >= 1.15 on average over the configurations), `auto_over_ar` (>= 1: never slower than plain decoding),
`auto_of_reference` (>= 0.9). The figures say whether each is met; `quality.host.mean.ENGINE` averages them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.common import SHAPES, Report, hybrid, synthetic
from ecosim.catalog.devices import get_device
from ecosim.catalog.hosts import load_host
from ecosim.catalog.serving import load_serving
from ecosim.cost import CostConfig
from ecosim.errors import EcoSimError
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.simulate import cost_model
from ecosim.trace.io import read_trace

BUDGETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
# (host, GPU beside it under cpu-moe)
HOSTS = (("xeon-6454s-2s", "rtx4090d"), ("epyc-9654-1s", "rtx4090"), ("desktop-ddr5-2ch", "rtx4090"))
QUICK_HOSTS = HOSTS[:1]  # --quick: a smoke test, one host
DTYPE = {"deepseek-v3.1": "q4_k_m", "qwen3-235b-a22b": "q4_k_m"}  # the gpt-oss models keep their mxfp4
ENGINES = ("ktransformers", "ik_llama.cpp")
DRAFT_MAX = 16  # llama.cpp's --draft-max default (common/speculative.h n_draft)


def configs(r: TraceReplay, hosts: tuple[tuple[str, str], ...]) -> list[tuple[str, str, CostConfig, object]]:
    """(host, placement, config, cost) of every host placement that fits this trace's model."""
    out = []
    for engine in ENGINES:
        for host, gpu in hosts:
            for placement in ("cpu-moe", "cpu"):
                config = CostConfig(serving=load_serving(engine), host=load_host(host), dtype=DTYPE.get(r.trace.model.name))
                try:
                    cost = cost_model(r.trace, get_device(gpu), parse_placement(placement), config)
                except EcoSimError:
                    continue
                out.append((host, placement, config, cost))
    return out


def one(report: Report, label: str, r: TraceReplay, host: str, placement: str, cost, budgets: tuple[int, ...]) -> dict[str, float]:
    size = int(r.trees.n_nodes.max()) - 1
    depth = int(r.trees.depth.max())
    t = {"ar": r.run(PolicySpec("ar"), cost).time_per_token_s}
    conf = [(r.run(PolicySpec("confidence", b), cost).time_per_token_s, b) for b in sorted({b for b in budgets if b <= size} | {size})]
    t["confidence_best"], budget = min(conf)
    t["auto"] = r.run(PolicySpec("ecospec-auto", predictor="token"), cost).time_per_token_s
    chain = min(DRAFT_MAX, depth)
    t["llamacpp_default"] = r.run(PolicySpec("vllm-chain", chain), cost).time_per_token_s
    t["reference"] = r.run(PolicySpec("ecospec-auto", predictor="oracle"), cost).time_per_token_s
    engine = cost.engine.name
    b = f"quality.host.{label}.{host}.{placement}.{engine}"
    notes = {"ar": f"{r.trace.provenance}, {cost.model.name}, {cost.device.name if placement == 'cpu' else cost.device.name + ' + ' + host} "
                   f"{placement}, profile {engine}, {r.trees.n_trees} positions",
             "confidence_best": f"budget {budget}", "llamacpp_default": f"chain of {chain} (--draft-max {DRAFT_MAX}, recorded depth {depth})",
             "reference": "auto with the true routing as its prediction"}
    for k, v in t.items():
        report.add(b, f"{k}_ms_per_token", v * 1e3, "ms", note=notes.get(k, ""))
    ratios = {"auto_over_confidence": t["confidence_best"] / t["auto"], "auto_over_ar": t["ar"] / t["auto"],
              "auto_of_reference": t["reference"] / t["auto"], "auto_over_llamacpp": t["llamacpp_default"] / t["auto"],
              "confidence_over_ar": t["ar"] / t["confidence_best"]}
    report.add(b, "auto_over_confidence", ratios["auto_over_confidence"], "x", target=">= 1.15")
    report.add(b, "auto_over_ar", ratios["auto_over_ar"], "x", target=">= 1.0")
    report.add(b, "auto_of_reference", ratios["auto_of_reference"], "of reference", target=">= 0.9")
    report.add(b, "auto_over_llamacpp", ratios["auto_over_llamacpp"], "x")
    report.add(b, "confidence_over_ar", ratios["confidence_over_ar"], "x")
    return ratios


def run(report: Report, cache: Path, quick: bool, requests: int = 16, positions: int = 250, routing: Path | None = None) -> None:
    paths = [(shape, synthetic(cache, shape, requests, positions)) for shape in SHAPES]
    if routing is not None and routing.is_dir():
        paths.append(("gpt-oss-20b-hybrid", hybrid(cache, routing, requests, positions)))
    else:
        print(f"  (no real routing at {routing}: the hybrid gpt-oss-20b trace is skipped)", flush=True)
    budgets = (2, 4, 8, 16) if quick else BUDGETS
    rows: dict[str, list[dict[str, float]]] = {}
    for label, path in paths:
        r = TraceReplay(read_trace(path))
        for host, placement, _, cost in configs(r, QUICK_HOSTS if quick else HOSTS):
            rows.setdefault(cost.engine.name, []).append(one(report, label, r, host, placement, cost, budgets))
    for engine, got in rows.items():
        mean = {k: float(np.mean([x[k] for x in got])) for k in got[0]}
        b, n = f"quality.host.mean.{engine}", f"over {len(got)} configurations"
        report.add(b, "auto_over_confidence", mean["auto_over_confidence"], "x", target=">= 1.15", note=n)
        report.add(b, "auto_over_ar_min", min(x["auto_over_ar"] for x in got), "x", target=">= 1.0", note=n + ": the worst")
        report.add(b, "auto_of_reference_min", min(x["auto_of_reference"] for x in got), "of reference",
                   target=">= 0.9", note=n + ": the worst")
        report.add(b, "auto_over_llamacpp", mean["auto_over_llamacpp"], "x", note=n)
        report.add(b, "confidence_over_ar", mean["confidence_over_ar"], "x", note=n)
