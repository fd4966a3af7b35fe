"""A published row priced by the step model: its times as linear functions of the serving profile's free constants.

Every predicted time is linear in the free constants theta (FREE, or HOST_FREE for an engine with experts in host
memory): t(theta) = r + f . theta (they only add terms, outside any max), so each row is priced once at theta = 0
and once per unit vector, and every fit is exact linear algebra (fit.py). The synthetic trace a row is priced on
(and, for a speculative row, the bisection of its acceptance knob) does not depend on the serving profile: it is
built once per setting (`_replay`) and priced under as many profiles as a fit asks for.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.catalog.devices import get_device
from ecosim.catalog.drafts import draft_cost
from ecosim.catalog.dtypes import at_dtype
from ecosim.catalog.hosts import load_host
from ecosim.catalog.models import ModelShape, get_model
from ecosim.catalog.serving import ServingProfile
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.fidelity.rows import PLAIN, _model
from ecosim.placements import parse_placement
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.routing.presets import knobs_of, load_preset, shipped_preset
from ecosim.synth import SynthConfig, calibrated, synthesize
from ecosim.trace.io import Trace, full_manifest

FREE = ("step_fixed_s", "kernel_latency_s", "collective_latency_s", "spec_level_s", "spec_sync_s")
# Rows whose sim names an engine profile of their own (`sim.profile`: llama.cpp, KTransformers, ...) are fitted apart,
# on their own fit rows, over the terms such an engine adds: a fixed time per step, its GPU kernels' latency, and a
# time per host layer.
HOST_FREE = ("step_fixed_s", "kernel_latency_s", "host_layer_s")
POSITIONS = 64  # per request of a synthetic trace; 2 requests


@dataclass(frozen=True)
class Linear:
    """Seconds as r + f . theta over the free constants FREE."""

    r: float
    f: tuple[float, ...]

    def at(self, theta: np.ndarray) -> float:
        return float(self.r + np.dot(self.f, theta))


@dataclass
class Priced:
    """A row's predicted times (linear in theta) and the synthetic trace's accept length."""

    plain_token: Linear  # ar, seconds per token
    spec_token: Linear | None = None  # confidence, seconds per token
    spec_step: Linear | None = None  # confidence, seconds per step
    plain_step: Linear | None = None
    accept_len: float | None = None
    accept_knob: float | None = None



def _synth(sim: dict[str, Any], speculative: bool, **fields: Any) -> SynthConfig:
    """A synthetic trace's config routed like the row's model: the preset its `sim.preset` names (a model
    outside the catalogue: fit one with `ecosim synth --model CONFIG --calibrate ROUTING OUT`), else the
    shape's shipped preset (gpt-oss-20b's fit to real routing, or that fit scaled to the shape:
    routing/presets), so a verified tree reads the union real routing would give it, not the generator's
    unfitted defaults. A plain step routes one token, whose top-k experts the knobs barely move (which
    device holds them under ep:N, at most a fraction of a percent), so a model without a preset is priced
    with the defaults there; a speculative row needs one."""
    if sim.get("preset"):
        p = load_preset(sim.get("_preset", sim["preset"]))
        return SynthConfig(**knobs_of(p), preset=f"preset {sim['preset']}: {p['source']}", **fields)
    shape = get_model(_model(sim))
    if shipped_preset(shape):
        return calibrated(shape, **fields)
    if speculative:
        raise EcoSimError(f"fidelity: no routing preset for {sim['model']!r}: a speculative row needs one "
                          "(sim.preset; fit it with ecosim synth --calibrate)")
    return SynthConfig(**fields)


def _trace(shape: ModelShape, cfg: SynthConfig, route: bool = True) -> Trace:
    manifest, positions, nodes = synthesize(shape, cfg, route)
    return Trace(Path(f"synthetic-{shape.name}"), full_manifest(manifest), positions, nodes)


def _linear(replay: TraceReplay, spec: PolicySpec, costs: list[CostModel], per: str) -> Linear:
    rows = [replay.run(spec, c) for c in costs]
    denom = [float(x.tokens if per == "token" else x.steps) for x in rows]
    t = [x.time_s / d for x, d in zip(rows, denom)]
    return Linear(t[0], tuple(x - t[0] for x in t[1:]))


def _costs(shape: ModelShape, sim: dict[str, Any], base: ServingProfile, depth: int,
           free: tuple[str, ...] = FREE) -> list[CostModel]:
    device = get_device(sim["hardware"])
    if int(sim.get("nodes", 1)) > 1:  # the placement spans nodes: its collectives cross the inter-node fabric
        device = device.across_nodes()
    device = device.replace(link_bw=sim.get("link_bw"), link_latency_s=sim.get("link_latency_s"))
    place = parse_placement(sim["placement"])
    draft = draft_cost({"kind": sim.get("draft", "eagle3")}, shape)
    out = []
    engine = ServingProfile.from_dict(sim.get("serving") or {}, base)  # the row's declared engine terms, checked
    host = load_host(sim["host"]) if sim.get("host") else None  # experts in host RAM (cpu-moe[:N], cpu)
    for unit in (None, *free):
        prof = engine.replace(**{k: (1.0 if k == unit else 0.0) for k in free})
        out.append(CostModel(shape, device, place, CostConfig(serving=prof, host=host), tree_depth=depth, draft=draft))
    out[0].check(int(sim["context"]) + POSITIONS + 64)
    return out


def price_row(row: dict[str, Any], base: ServingProfile, free: tuple[str, ...] = FREE) -> Priced:
    """The row's times under `base` with theta free (see the module docstring)."""
    kind = "plain" if row["metric"] in PLAIN else "ratio" if row["metric"] == "step_ratio" else "spec"
    return _price(json.dumps(row["sim"], sort_keys=True), kind, base, free)


def _shape(sim: dict[str, Any]) -> ModelShape:
    """The row's model at its dtype, with `sim.top_k` experts per token where it selects fewer (KTransformers'
    "6 experts" runs of an 8-expert model)."""
    shape = at_dtype(get_model(_model(sim)), sim["dtype"])
    return dataclasses.replace(shape, top_k=int(sim["top_k"])) if sim.get("top_k") else shape


def _ratio(replay: TraceReplay, costs: list[CostModel], n: int, ctx: int) -> Priced:
    """A forward of n consecutive tokens against one: the union of n consecutive continuation tokens' experts
    (ar's steps, within a request), priced as plain forwards of n and of 1 tokens."""
    steps = replay.steps(PolicySpec("ar"))
    req, bits = steps.request, steps.bits
    starts = [i for i in range(len(req) - n + 1) if req[i] == req[i + n - 1]]
    union = np.stack([np.bitwise_or.reduce(bits[i:i + n], axis=0) for i in starts])
    one = bits[starts]

    def lin(u: np.ndarray, tokens: int) -> Linear:
        t = []
        for c in costs:
            per = c.placement.union_per_group(u, c.model.num_experts)
            tok = np.full(len(u), tokens)
            t.append(float(c.step_times(per, tok, np.full(len(u), ctx), speculative=False).mean()))
        return Linear(t[0], tuple(x - t[0] for x in t[1:]))

    single = lin(one, 1)
    return Priced(single, spec_step=lin(union, n), plain_step=single, spec_token=single)


@lru_cache(maxsize=256)
def _replay(sim_json: str, kind: str) -> tuple[TraceReplay, float | None, float | None]:
    """The row's synthetic trace replayed (and, speculative, its acceptance knob bisected to the row's accept
    length): what pricing needs that no serving profile changes, shared by every profile a row is priced under.
    Returns the replay, the trace's mean accept length and the knob (None for plain and ratio rows)."""
    sim = json.loads(sim_json)
    shape = _shape(sim)
    ctx = int(sim["context"])
    routed = _synth(sim, kind == "spec")  # read once: the bisection below only changes the acceptance knob
    if kind != "spec":
        return TraceReplay(_trace(shape, dataclasses.replace(routed, requests=2, positions=POSITIONS, depth=1, topk=1,
                                                             max_nodes=1, prompt_len=ctx))), None, None
    depth, topk, verified = int(sim["depth"]), int(sim["topk"]), int(sim["verified"])
    budget = verified - 1
    nodes = max(budget, min(topk + (depth - 1) * topk * topk, 64))
    spec = PolicySpec("confidence", budget)

    def at(accept: float) -> SynthConfig:
        return dataclasses.replace(routed, requests=2, positions=POSITIONS, depth=depth, topk=topk, max_nodes=nodes,
                                   accept=accept, prompt_len=ctx)

    def accept_len(accept: float) -> float:  # confidence picks by draft probability: routing plays no part
        steps = TraceReplay(_trace(shape, at(accept), route=False)).steps(spec)
        return float(steps.tokens.sum() / len(steps))

    lo, hi = 0.0, 1.0
    best: tuple[float, float] | None = None
    for _ in range(8):  # bisection on the generator's acceptance knob
        mid = (lo + hi) / 2
        al = accept_len(mid)
        if best is None or abs(al - sim["accept_len"]) < abs(best[1] - sim["accept_len"]):
            best = (mid, al)
        lo, hi = (mid, hi) if al < sim["accept_len"] else (lo, mid)
    assert best is not None
    knob, al = best
    return TraceReplay(_trace(shape, at(knob))), al, knob


@lru_cache(maxsize=4096)
def _price(sim_json: str, kind: str, base: ServingProfile, free: tuple[str, ...] = FREE) -> Priced:
    """price_row's work, shared by rows of one setting (a tok/s row and its speedup row)."""
    sim = json.loads(sim_json)
    shape = _shape(sim)
    replay, al, knob = _replay(sim_json, kind)
    if kind != "spec":
        costs = _costs(shape, sim, base, 0, free)
        if kind == "ratio":
            return _ratio(replay, costs, int(sim["tokens"]), int(sim["context"]))
        return Priced(_linear(replay, PolicySpec("ar"), costs, "token"))
    spec = PolicySpec("confidence", int(sim["verified"]) - 1)
    costs = _costs(shape, sim, base, int(sim["depth"]), free)
    return Priced(_linear(replay, PolicySpec("ar"), costs, "token"), _linear(replay, spec, costs, "token"),
                  _linear(replay, spec, costs, "step"), _linear(replay, PolicySpec("ar"), costs, "step"), al, knob)


def predict(row: dict[str, Any], p: Priced, theta: np.ndarray) -> float:
    """The row's metric as the simulator predicts it under theta."""
    m = row["metric"]
    t = p.plain_token.at(theta)
    if m == "decode_tok_s":
        return 1.0 / t
    if m == "decode_ms_per_token":
        return 1e3 * t
    assert p.spec_token is not None and p.spec_step is not None and p.plain_step is not None
    if m == "spec_speedup":
        return t / p.spec_token.at(theta)
    if m == "spec_tok_s":
        return 1.0 / p.spec_token.at(theta)
    return p.spec_step.at(theta) / p.plain_step.at(theta)


def _seconds(row: dict[str, Any]) -> float:
    """The seconds per token a time row publishes (tok/s rows inverted)."""
    return row["value"] / 1e3 if row["metric"] == "decode_ms_per_token" else 1.0 / row["value"]


def _time(row: dict[str, Any], p: Priced) -> Linear:
    """The predicted seconds per token a time row is compared with."""
    if row["metric"] == "spec_tok_s":
        assert p.spec_token is not None
        return p.spec_token
    return p.plain_token

