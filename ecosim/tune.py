"""`ecosim tune`: the best speculative-decoding setting for a model on a machine, and the engine
flags that realise the nearest static one.

Candidates, each priced by the fast engine over all the traces (total time / total tokens):
- `ar`: speculation off (always a candidate: a setting slower than plain decoding is never
  recommended);
- static EAGLE trees as SGLang builds them (baselines.eagle_tree): every `--speculative-num-steps`
  S in 1..the recorded depth, `--speculative-eagle-topk` K in 1, 2, 4, ... up to the recorded
  top-k, and `--speculative-num-draft-tokens` N in 2, 3, 4, 6, 8, 12, 16, ... up to the recorded
  tree's size + 1; K = 1 is vLLM's chain of `num_speculative_tokens` = S;
- `ecospec-auto` (adaptive: per step, no knob), with the given predictor.
The recorded trees bound what can be evaluated: a static tree larger than the recorded one is
not a candidate (record deeper or wider trees to tune beyond them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.cost import CostModel
from ecosim.metrics import Row, total
from ecosim.policies import PolicySpec, registry
from ecosim.policies.presets import eagle_tree
from ecosim.replay import TraceReplay

SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class Static:
    """An engine's static tree: SGLang's three flags (K = 1: vLLM's chain of S tokens)."""

    steps: int
    topk: int
    draft_tokens: int

    def sglang(self) -> str:
        return (f"--speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
                f"--speculative-num-draft-tokens {self.draft_tokens}")

    def vllm(self) -> str | None:
        return f'"num_speculative_tokens": {self.steps}' if self.topk == 1 else None


@dataclass
class Candidate:
    name: str
    row: Row
    static: Static | None = None

    @property
    def time_per_token(self) -> float:
        return self.row.time_per_token_s


def statics(replays: list[TraceReplay]) -> list[Static]:
    """The static trees the recorded trees can supply."""
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


def tune(replays: list[TraceReplay], costs: list[CostModel], predictor: str) -> dict[str, Candidate]:
    """Every candidate's total over the traces; keys: `ar`, `auto`, and one per static tree."""
    out: dict[str, Candidate] = {
        "ar": Candidate("ar", total([r.run(PolicySpec("ar"), c) for r, c in zip(replays, costs)])),
        "auto": Candidate(f"ecospec-auto ({predictor})",
                          total([r.run(PolicySpec("ecospec-auto", predictor=predictor), c) for r, c in zip(replays, costs)])),
    }
    for st in statics(replays):
        rows = [r.run_selection(eagle_tree(r.trees, st.draft_tokens, st.steps, st.topk), c) for r, c in zip(replays, costs)]
        out[f"static S={st.steps} K={st.topk} N={st.draft_tokens}"] = Candidate("static", total(rows), st)
    return out


def recommend(cands: dict[str, Candidate]) -> dict[str, object]:
    """The best candidate overall, the best static tree and chain, and the adaptive gain beyond it."""
    best = min(cands.values(), key=lambda c: c.time_per_token)
    static = [c for c in cands.values() if c.static is not None]
    best_static = min(static, key=lambda c: c.time_per_token) if static else None
    chains = [c for c in static if c.static and c.static.topk == 1]
    best_chain = min(chains, key=lambda c: c.time_per_token) if chains else None
    ar, auto = cands["ar"].time_per_token, cands["auto"].time_per_token
    doc: dict[str, object] = {
        "best": best.name if best.static is None else "static",
        "best_ms_per_token": best.time_per_token * 1e3,
        "speedup_vs_ar": ar / best.time_per_token,
        "ar_ms_per_token": ar * 1e3,
        "auto_ms_per_token": auto * 1e3,
        "speculation_pays": best.name != registry.baseline().name,
    }
    if best_static is not None and best_static.static is not None:
        s = best_static.static
        doc["static"] = {"steps": s.steps, "topk": s.topk, "draft_tokens": s.draft_tokens,
                         "ms_per_token": best_static.time_per_token * 1e3, "speedup_vs_ar": ar / best_static.time_per_token,
                         "sglang_flags": s.sglang(), "pays": best_static.time_per_token < ar}
        doc["auto_gain_over_static"] = best_static.time_per_token / auto
    if best_chain is not None and best_chain.static is not None:
        doc["vllm"] = {"num_speculative_tokens": best_chain.static.steps, "ms_per_token": best_chain.time_per_token * 1e3,
                       "speedup_vs_ar": ar / best_chain.time_per_token, "pays": best_chain.time_per_token < ar}
    return doc


__all__ = ["Candidate", "Static", "recommend", "statics", "tune"]
