"""A sweep's grid: parsing the axes, the Cartesian product, and grouping it into tasks.

Axes (each a comma list; numeric axes also take inclusive ranges `start:stop:step`):

    policy     the registry's policies (ecosim.policies.registry); the baseline (ar) and the bound
               (oracle) are always added: the ratios need them
    one axis per knob of the policies asked for, e.g. budget 8:64:8, lambda 0:2:0.05,
               predictor token,oracle, score difference,ratio
    draft-steps  1:8 or recorded (default): the setting's draft steps; each trace is replayed cut to
               each depth (trace/cut.py; at most its recorded depth)
    hardware   h200,b200 (catalogue names or profile .json files)
    bw         2TB/s,3.3TB/s,4.8TB/s (default: the device's own)
    placement  hbm,ep:8,offload:64

A policy ignores the axes it has no use for, so they collapse: `confidence` is one configuration per
budget (lambda, predictor and score are null), `ar` and `oracle` one per pricing. A configuration is
(selection, pricing, trace); its id is the hash of its canonical JSON, which includes the trace's
resolved path and content fingerprint, the resolved device (every field) and the cost settings.

Tasks group configurations by (trace, selection): the selection (and walk and unions) is done once
per task and priced under every hardware/bandwidth/placement variant, which is cheap.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ecosim.catalog.devices import Device, get_device
from ecosim.cost import CostConfig, Terms, cost_doc
from ecosim.errors import EcoSimError
from ecosim.placements import parse_placement
from ecosim.policies import Knob, PolicySpec, registry
from ecosim.units import parse_quantity

_SIG = 12  # significant digits a range value is rounded to (0.1 + 0.05 * 2 -> 0.2, not 0.2000...04)


# ------------------------------------------------------------------------------------------ parsing


def _items(text: str, what: str) -> list[str]:
    items = [s.strip() for s in str(text).split(",")]
    if not text or any(not s for s in items):
        raise EcoSimError(f"--{what} {text!r}: empty item; expected a comma list")
    return items


def _dedupe(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    return [v for v in values if not (v in seen or seen.add(v))]


def _number(text: str, what: str, integer: bool) -> float:
    try:
        x = float(text)
    except ValueError:
        raise EcoSimError(f"--{what}: {text!r} is not a number") from None
    if not math.isfinite(x):
        raise EcoSimError(f"--{what}: {text!r} is not finite")
    if integer and x != int(x):
        raise EcoSimError(f"--{what}: {text!r} is not an integer")
    return x


def parse_range(text: str, what: str, integer: bool = False) -> list[float]:
    """`a,b,c` and/or `start:stop:step` (stop included within float tolerance), in order, deduplicated."""
    out: list[float] = []
    for item in _items(text, what):
        parts = item.split(":")
        if len(parts) == 1:
            out.append(_number(parts[0], what, integer))
            continue
        if len(parts) != 3:
            raise EcoSimError(f"--{what}: {item!r} is not a value or a range start:stop:step")
        start, stop, step = (_number(p, what, integer) for p in parts)
        if step <= 0:
            raise EcoSimError(f"--{what}: {item!r} needs a positive step")
        if stop < start:
            raise EcoSimError(f"--{what}: {item!r} stops before it starts")
        n = int(math.floor((stop - start) / step + 1e-9)) + 1
        if n > 100_000:
            raise EcoSimError(f"--{what}: {item!r} has {n} values; at most 100000")
        out.extend(float(f"{start + i * step:.{_SIG}g}") for i in range(n))
    return _dedupe([float(int(x)) if integer else x for x in out])


def parse_axis(knob: Knob | str, text: str) -> list[Any]:
    """A knob's values (a knob or its column name): a comma list, and ranges for a numeric knob;
    each value checked as the knob checks it, and resolved (a predictor loaded) once."""
    k = registry.knob_by_key(knob) if isinstance(knob, str) else knob
    what = k.flag.lstrip("-")
    if k.type in (int, float):
        raw: list[Any] = []
        for item in _items(text, what):  # a knob's word (`auto`) stands among its numbers
            raw += [item] if k.policy_for(item) else [k.type(x) for x in parse_range(item, what, integer=k.type is int)]
        raw = _dedupe(raw)
    else:
        raw = _dedupe(_items(text, what))
    values = []
    for v in raw:
        try:
            values.append(k.coerce(v))
            if k.resolve:
                k.resolve(values[-1])
        except EcoSimError as e:
            raise EcoSimError(f"{k.flag} {text!r}: {e}") from None
    return values


def parse_policies(text: str) -> list[str]:
    names = _dedupe(_items(text, "policy"))
    for n in names:
        if n not in registry.names():
            raise EcoSimError(f"--policy: unknown policy {n!r}; known: {', '.join(registry.names())}")
    return sorted(names, key=registry.order_of)


RECORDED = "recorded"  # the draft-steps axis value for a trace's own recorded depth


def parse_steps(text: str | None) -> list[int | None]:
    """The draft-steps axis: integers >= 1 and ranges, and/or `recorded` (None: the trace's own depth)."""
    if text is None:
        return [None]
    out: list[int | None] = []
    for item in _items(text, "draft-steps"):
        if item.lower() == RECORDED:
            out.append(None)
            continue
        for x in parse_range(item, "draft-steps", integer=True):
            if x < 1:
                raise EcoSimError(f"--draft-steps {text!r}: steps must be >= 1, got {int(x)} (speculation off is the policy ar)")
            out.append(int(x))
    return _dedupe(out)


def parse_bandwidths(text: str | None) -> list[float | None]:
    """Bytes/s per item; `None` (the device's own bandwidth) when the option is not given."""
    if text is None:
        return [None]
    return _dedupe([parse_quantity(s, "bandwidth") for s in _items(text, "bw")])


def parse_placements(text: str) -> list[str]:
    """Canonical placement strings (`offload:64` -> `offload:64:lru`); colons belong to an item."""
    return _dedupe([str(parse_placement(s)) for s in _items(text, "placement")])


def parse_hardware(text: str) -> list[str]:
    """Catalogue names or profile files; each must load (a one-line error otherwise)."""
    names = _dedupe(_items(text, "hardware"))
    for n in names:
        get_device(n)
    return names


# ------------------------------------------------------------------------------------ configurations


Selection = PolicySpec  # what a task selects once: a policy and the knobs it uses


@dataclass(frozen=True)
class Pricing:
    """One cost model: a device (with its bandwidth) and a placement."""

    hardware: str  # as given: a catalogue name or a profile file
    bw: float | None  # bytes/s override, None for the device's own
    placement: str  # canonical, e.g. offload:64:lru


@dataclass(frozen=True)
class Settings:
    """What every configuration of a sweep shares: cost settings and the device overrides."""

    cost: CostConfig = field(default_factory=CostConfig)
    peak: str | None = None
    link_bw: str | None = None
    pcie_bw: str | None = None

    def device(self, p: Pricing) -> Device:
        """The device exactly as `ecosim replay --hardware H --bw X ...` builds it."""
        peak = parse_quantity(self.peak, "flops") if self.peak else None
        return get_device(p.hardware).replace(
            hbm_bw=p.bw,
            peak_bf16=peak,
            peak_fp8=peak,
            link_bw=parse_quantity(self.link_bw, "bandwidth") if self.link_bw else None,
            pcie_bw=parse_quantity(self.pcie_bw, "bandwidth") if self.pcie_bw else None,
        )


@dataclass(frozen=True)
class TraceRef:
    """A trace as a sweep names it: resolved path and content fingerprint."""

    path: str
    fingerprint: str
    steps: int | None = None  # the setting's draft steps: the trace replayed cut to this depth (None: as recorded)


@dataclass(frozen=True)
class Config:
    """One row of results.parquet: a selection priced one way on one trace."""

    trace: TraceRef
    selection: Selection
    pricing: Pricing
    id: str  # hash of canonical_json(...)


# The knob keys of format 1, present (null when the policy lacks the knob) in every configuration's
# text so that the ids of sweeps written before the registry stay the same; any other knob appears
# only in the configurations of the policies that have it.
FORMAT_1_KEYS = ("budget", "lambda", "predictor", "predictor_fingerprint", "score")


def selection_doc(sel: Selection, fingerprints: dict[tuple[str, Any], str | None]) -> dict[str, Any]:
    """The policy, its knobs by column, and the content hash of each knob value that names a file."""
    doc: dict[str, Any] = {"policy": sel.name, **dict.fromkeys(FORMAT_1_KEYS)}
    for k in sel.policy.knobs:
        v = sel.values[k.name]
        doc[k.key] = v
        if k.fingerprint is not None:
            doc[f"{k.key}_fingerprint"] = fingerprints.get((k.name, v))
    return doc


def canonical_json(trace: TraceRef, sel: Selection, device: Device, placement: str, settings: Settings,
                   fingerprints: dict[tuple[str, Any], str | None] | None = None) -> str:
    """The text a configuration's id hashes: sorted keys, no whitespace, floats as Python's repr.

    `terms` holds every constant the cost model resolves for this device (serving profile included),
    so refitting a shipped profile gives new ids and a resumed sweep never mixes two cost models."""
    doc = {
        "format": 1,
        "terms": asdict(Terms.resolve(settings.cost, device)),
        "trace": {"path": trace.path, "fingerprint": trace.fingerprint,  # a cut's depth only when given: ids stay
                  **({"draft_steps": trace.steps} if trace.steps is not None else {})},
        **selection_doc(sel, fingerprints or {}),
        "device": device.to_dict(), "placement": placement, "cost": cost_doc(settings.cost), "engine": "fast",
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class Grid:
    """The axes of a sweep, as parsed: the policies, each knob's values (by knob name), the pricings."""

    policies: list[str]
    knobs: dict[str, list[Any]]
    hardware: list[str]
    bandwidths: list[float | None]
    placements: list[str]
    settings: Settings = field(default_factory=Settings)
    draft_steps: list[int | None] = field(default_factory=lambda: [None])  # the draft-steps axis (None: recorded)

    def selections(self) -> list[Selection]:
        """Selections in a fixed order (the registry's, then each knob's values, knob by knob);
        the baseline and the bound always included, knobs a policy lacks collapsed."""
        out: list[Selection] = []
        seen: set[Selection] = set()
        for name in sorted(set(self.policies) | set(registry.references()), key=registry.order_of):
            knobs = registry.get(name).knobs
            for values in itertools.product(*(self.knobs.get(k.name, []) for k in knobs)):
                s = Selection(name, **{k.name: v for k, v in zip(knobs, values)})
                if s not in seen:  # a knob's word (lambda auto) names one selection whatever the other knobs
                    seen.add(s)
                    out.append(s)
        return out

    def pricings(self) -> list[Pricing]:
        return [Pricing(h, bw, pl) for h in self.hardware for bw in self.bandwidths for pl in self.placements]

    def configs(self, traces: list[TraceRef]) -> list[Config]:
        """Every configuration, in results order: trace, pricing, then selection."""
        pricings = self.pricings()
        devices = {p: self.settings.device(p) for p in pricings}
        fingerprints = {(k.name, v): k.fingerprint(v) for k in registry.knobs() if k.fingerprint
                        for v in self.knobs.get(k.name, [])}
        out = []
        for t in (replace(t, steps=n) for t in traces for n in self.draft_steps):
            for p in pricings:
                for s in self.selections():
                    text = canonical_json(t, s, devices[p], p.placement, self.settings, fingerprints)
                    out.append(Config(t, s, p, config_id(text)))
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "policies": self.policies, **{k.axis: self.knobs.get(k.name, []) for k in registry.knobs()},
            "hardware": self.hardware, "bandwidths": self.bandwidths, "placements": self.placements,
            "draft_steps": self.draft_steps, "cost": cost_doc(self.settings.cost), "peak": self.settings.peak,
            "link_bw": self.settings.link_bw,
            "pcie_bw": self.settings.pcie_bw,
        }


@dataclass
class Task:
    """The unit of work a worker runs: one selection on one trace, priced every way asked."""

    trace: TraceRef
    selection: Selection
    pricings: list[tuple[str, Pricing]]  # (config id, pricing)
    settings: Settings

    @property
    def weight(self) -> float:
        """Rough relative cost, to start the heavy tasks first (the policy's entry says)."""
        return self.selection.policy.weight(self.selection.values, len(self.pricings))


def group_tasks(configs: list[Config], settings: Settings) -> list[Task]:
    """Configurations sharing (trace, selection) become one task; heavy tasks first, by trace."""
    tasks: dict[tuple[TraceRef, Selection], Task] = {}
    for c in configs:
        key = (c.trace, c.selection)
        if key not in tasks:
            tasks[key] = Task(c.trace, c.selection, [], settings)
        tasks[key].pricings.append((c.id, c.pricing))
    order = {t: i for i, t in enumerate(dict.fromkeys(c.trace for c in configs))}
    return sorted(tasks.values(), key=lambda t: (order[t.trace], -t.weight))
