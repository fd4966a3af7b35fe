"""The paper's headline speedup read two ways, on a replay of a paper-scale trace.

"Up to 1.62x" (ecosim/catalog/paper.py) names no baseline. Over plain autoregressive decoding it
compares the self-tuning policy with `ar`; over EAGLE-style default trees, with `eagle2-default`
(EAGLE-2's 60-token tree: the whole of a recorded tree of up to 60 candidates) and `sglang-default` (SGLang's
8-token tree). The simulator splits the first into two factors, per trace:

    T_ar / T_auto  =  (T_ar / T_eagle2-default)  x  (T_eagle2-default / T_auto)
                        speculation itself             cost-awareness

(T: time per token; a factor above 1 is a gain), since `eagle2-default` is the same speculation
with no cost in its choice of tree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ecosim.catalog.paper import CLAIMS
from ecosim.metrics import Row
from ecosim.policies.ar import POLICY as AR
from ecosim.policies.ecospec_auto import POLICY as AUTO
from ecosim.policies.presets import EAGLE2, SGLANG
from ecosim.simulate import PolicyResult


POLICIES = (AR, AUTO, EAGLE2, SGLANG)  # what a reading replays


@dataclass
class Reading:
    trace: str
    model: str
    provenance: str
    paper_over_plain: float
    paper_baseline: str  # the paper's engine baseline (MTP, EAGLE-3)
    paper_over_baseline: float  # implied: over_plain / baseline's over plain
    auto_over_ar: float  # reading 1: ar's time / auto's
    auto_over_eagle2: float  # reading 2: eagle2-default's time / auto's (cost-awareness)
    auto_over_sglang: float | None  # sglang-default's time / auto's
    eagle2_over_ar: float  # speculation itself: ar's time / eagle2-default's

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        sg = f" and {self.auto_over_sglang:.3f}x against sglang-default" if self.auto_over_sglang is not None else ""
        return (f"the paper against here, {self.model} ({self.trace}, {self.provenance}): over plain decoding the paper gives "
                f"{self.paper_over_plain:.2f}x, ecospec-auto here {self.auto_over_ar:.3f}x; over the default tree the paper "
                f"implies {self.paper_over_baseline:.2f}x ({self.paper_over_plain:.2f}x / {self.paper_baseline}'s "
                f"{self.paper_over_plain / self.paper_over_baseline:.2f}x), ecospec-auto here {self.auto_over_eagle2:.3f}x against "
                f"eagle2-default{sg}. Here speculation itself (eagle2-default over ar) gives {self.eagle2_over_ar:.3f}x, "
                f"cost-awareness (ecospec-auto over eagle2-default) {self.auto_over_eagle2:.3f}x")


def _ratio(slow: Row, fast: Row) -> float:
    return slow.time_per_token_s / fast.time_per_token_s if fast.time_per_token_s else 0.0


def readings(results: list[PolicyResult], models: list[str]) -> list[Reading]:
    """A reading for each trace of a paper model, when ar, ecospec-auto and eagle2-default were all
    replayed (`replay` without --policy); none otherwise."""
    by = {r.spec.name: r for r in results}
    if not all(n in by for n in (AR.name, AUTO.name, EAGLE2.name)):
        return []
    ar, auto, eagle2, sglang = by[AR.name], by[AUTO.name], by[EAGLE2.name], by.get(SGLANG.name)
    out = []
    for i, model in enumerate(models):
        claim = CLAIMS.get(model)
        if claim is None:
            continue
        a, e = auto.rows[i], eagle2.rows[i]
        out.append(Reading(
            a.trace, model, a.provenance, claim.over_plain, claim.baseline, claim.over_baseline,
            _ratio(ar.rows[i], a), _ratio(e, a), _ratio(sglang.rows[i], a) if sglang else None, _ratio(ar.rows[i], e),
        ))
    return out
