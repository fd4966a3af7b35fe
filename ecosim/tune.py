"""`ecosim tune`: the best speculative-decoding setting for a model on a machine, and the engine
flags that realise the nearest static one.

Candidates, each priced by the fast engine over all the traces (total time / total tokens), at every
draft step count S in 1..the recorded depth (a setting of S steps sees the recorded trees cut to
depth S and pays S draft steps: trace/cut.py, policies/base.py DRAFTING_RULE):
- `ar`: speculation off (always a candidate: a setting slower than plain decoding is never
  recommended);
- static EAGLE trees as SGLang builds them (baselines.eagle_tree): `--speculative-num-steps` S,
  `--speculative-eagle-topk` K in 1, 2, 4, ... up to the recorded top-k, and
  `--speculative-num-draft-tokens` N in 2, 3, 4, 6, 8, 12, 16, ... up to the cut tree's size + 1;
  K = 1 is vLLM's chain of `num_speculative_tokens` = S;
- `ecospec-auto` (adaptive: per step, no knob) at each S, with the given predictor.
The recorded trees bound what can be evaluated: a static tree larger or deeper than the recorded
one is not a candidate (record deeper or wider trees to tune beyond them).

With `serve` (`--concurrency N`: N clients, each sending its next request when its last one ends,
served with continuous batching) every candidate is served by the event engine instead, so a
batch's steps share their expert reads, and each keeps its serving metrics (per-request tokens/s,
inter-token latency): the ranking is by time per token of the whole run, as at batch 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ecosim.catalog.drafts import sglang_draft_flags
from ecosim.cost import CostModel
from ecosim.des import DesConfig, des_steps
from ecosim.launch import ENGINES, Engine, Setting
from ecosim.metrics import Row, total
from ecosim.policies import PolicySpec, registry
from ecosim.policies.presets import eagle_tree
from ecosim.replay import TraceReplay, summarize
from ecosim.steps import Steps
from ecosim.simulate import at_steps
from ecosim.trace.cut import recorded_depth
from ecosim.trace.io import Trace

SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


Static = Setting  # an engine's static tree (K = 1: a chain of S tokens), as launch.py runs it


@dataclass
class Candidate:
    name: str
    row: Row
    static: Static | None = None
    steps: int = 0  # the setting's draft steps (0: speculation off)
    draft_s: dict[str, float] = field(default_factory=dict)  # per trace, seconds of a step drafting `steps`
    serving: dict[str, dict[str, object]] = field(default_factory=dict)  # per trace, the event engine's metrics (with `serve`)

    @property
    def time_per_token(self) -> float:
        return self.row.time_per_token_s


def statics(replays: list[TraceReplay]) -> list[Static]:
    """The static trees the (cut) recorded trees can supply."""
    depth = min(int(r.trees.depth.max(initial=0)) for r in replays)
    size = min(int(r.trees.n_nodes.max(initial=1)) for r in replays)
    topk = min(int(r.trace.manifest["tree"].get("topk", 1)) for r in replays)
    ks = sorted({k for k in (1, 2, 4, 8, 16) if k <= topk} | {topk})
    out = []
    for s in range(1, depth + 1):
        for k in ks:
            reach = k + (s - 1) * k * k  # nodes EAGLE drafts: K at depth 1, K x K below
            for n in sorted({x for x in SIZES if x <= size} | {size}):
                if n - 1 <= reach and (k > 1 or n == s + 1):
                    out.append(Static(s, k, n))
    return out


def step_counts(traces: list[Trace]) -> list[int]:
    """The draft step counts every trace can supply: 1..the shallowest recorded depth."""
    return list(range(1, min(recorded_depth(t) for t in traces) + 1))


def tune(traces: list[Trace], price: Callable[[Trace], CostModel], predictor: str,
         steps: Sequence[int] | None = None, predictors: dict[str, dict] | None = None,
         serve: DesConfig | None = None) -> dict[str, Candidate]:
    """Every candidate's total over the traces; keys: `ar`, `auto S=s` and one per static tree.
    `price` gives a trace's cost model (of the cut trace: its depth is the setting's steps);
    `serve`: each served by the event engine under these arrivals (module docstring)."""

    def priced(replays: list[TraceReplay], costs: list[CostModel], chosen: Callable[[TraceReplay], Steps | PolicySpec],
               name: str, static: Static | None = None, s: int = 0, draft: dict[str, float] | None = None) -> Candidate:
        if serve is None:
            rows = [r.run(x, c) if isinstance(x := chosen(r), PolicySpec) else summarize(r, x, c) for r, c in zip(replays, costs)]
            return Candidate(name, total(rows), static, s, draft or {})
        runs = [des_steps(r, r.steps(x, c) if isinstance(x := chosen(r), PolicySpec) else x, c, serve)
                for r, c in zip(replays, costs)]
        return Candidate(name, total([d.row for d in runs]), static, s, draft or {},
                         {r.trace.name: d.serving() for r, d in zip(replays, runs)})

    ar = [TraceReplay(t) for t in traces]
    out: dict[str, Candidate] = {"ar": priced(ar, [price(r.trace) for r in ar], lambda r: PolicySpec("ar"), "ar")}
    del ar  # its trees and steps are not needed beside the cut traces
    for s in steps or step_counts(traces):
        replays = [TraceReplay(at_steps(t, s), predictors=(predictors or {}).get(t.name, {})) for t in traces]
        costs = [price(r.trace) for r in replays]
        draft = {r.trace.name: c.draft_time(True) for r, c in zip(replays, costs)}
        auto = PolicySpec("ecospec-auto", predictor=predictor)
        out[f"auto S={s}"] = priced(replays, costs, lambda r: auto, f"ecospec-auto ({predictor}) S={s}", None, s, draft)
        for st in statics(replays):
            if st.steps != s:
                continue
            out[f"static S={st.steps} K={st.topk} N={st.draft_tokens}"] = priced(
                replays, costs, lambda r: r.selection_steps(eagle_tree(r.trees, st.draft_tokens, st.steps, st.topk)),
                "static", st, s, draft)
        del replays, costs  # this setting's cut traces go before the next setting's are cut
    return out


def _best(cands: list[Candidate]) -> Candidate | None:
    return min(cands, key=lambda c: c.time_per_token) if cands else None


def recommend(cands: dict[str, Candidate], engine: Engine | None = None, draft: dict[str, Any] | None = None,
              path: str | None = None) -> dict[str, object]:
    """The best setting `engine` can run (plain decoding or one of its static trees: launch.py), its
    flags for the traces' `draft` (its checkpoint at `path`), and beside it the best static tree, chain
    and adaptive setting, and what the adaptive policy would gain beyond the recommendation if an engine
    implemented it; `steps` and `draft_time_s` are the recommended setting's (the best static tree's
    when speculation is off: the setting the flags below name)."""
    engine, draft = engine or ENGINES["sglang"], draft or {}
    ar_c = cands["ar"]
    runnable = [c for c in cands.values() if c.static is not None and engine.runs(c.static, draft)]
    best = _best([ar_c, *runnable])
    overall = _best(list(cands.values()))
    assert best is not None and overall is not None
    static = [c for c in cands.values() if c.static is not None]
    best_static = _best(static)
    best_chain = _best([c for c in static if c.static and c.static.topk == 1])
    best_auto = _best([c for c in cands.values() if c.name.startswith("ecospec-auto")])
    ar = cands["ar"].time_per_token
    shown = best if best.steps else (_best(runnable) or best_static or best_auto or best)
    doc: dict[str, object] = {
        "engine": engine.name,
        "best": "static" if best.static is not None else registry.baseline().name,
        "flags": engine.flags(best.static, draft, path) if best.static is not None else None,
        "setting": ({"steps": best.static.steps, "topk": best.static.topk, "draft_tokens": best.static.draft_tokens}
                    if best.static is not None else None),
        "best_ms_per_token": best.time_per_token * 1e3,
        "speedup_vs_ar": ar / best.time_per_token,
        "ar_ms_per_token": ar * 1e3,
        "speculation_pays": best is not ar_c,
        "runnable": bool(runnable),  # the engine has a speculative mode for this draft kind at all
        "overall_best": overall.name if overall.static is None else "static",
        "overall_ms_per_token": overall.time_per_token * 1e3,
        "steps": best.steps,
        "draft_setting": shown.name if shown.static is None else f"static S={shown.static.steps} K={shown.static.topk} "
                                                                   f"N={shown.static.draft_tokens}",
        "draft_time_s": shown.draft_s,
    }
    if best.serving:  # served under --concurrency: what each request sees, recommended (and plain, if not the same)
        doc["serving"] = {"best": best.serving, **({"ar": ar_c.serving} if best is not ar_c else {})}
    if best_auto is not None:
        doc["auto_ms_per_token"] = best_auto.time_per_token * 1e3
        doc["auto"] = {"steps": best_auto.steps, "ms_per_token": best_auto.time_per_token * 1e3,
                       "speedup_vs_ar": ar / best_auto.time_per_token, "pays": best_auto.time_per_token < ar,
                       "gain_over_best": best.time_per_token / best_auto.time_per_token}
    if best_static is not None and best_static.static is not None:
        s = best_static.static
        doc["static"] = {"steps": s.steps, "topk": s.topk, "draft_tokens": s.draft_tokens,
                         "ms_per_token": best_static.time_per_token * 1e3, "speedup_vs_ar": ar / best_static.time_per_token,
                         "sglang_flags": s.sglang(), "pays": best_static.time_per_token < ar}
        head = sglang_draft_flags(draft, path)  # the draft's algorithm and path in front: a complete launch line
        if head is not None:
            doc["static"].update(sglang_draft_flags=head, sglang_flags=f"{head} {s.sglang()}")
        if best_auto is not None:
            doc["auto_gain_over_static"] = best_static.time_per_token / best_auto.time_per_token
    if best_chain is not None and best_chain.static is not None:
        doc["vllm"] = {"num_speculative_tokens": best_chain.static.steps, "ms_per_token": best_chain.time_per_token * 1e3,
                       "speedup_vs_ar": ar / best_chain.time_per_token, "pays": best_chain.time_per_token < ar}
    return doc


__all__ = ["Candidate", "Static", "recommend", "statics", "step_counts", "tune"]
