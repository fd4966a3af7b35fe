"""The shipped routing presets (the .json files beside this module) and the one way to read them.

A preset is the generator's knobs for one catalogue shape, with what they were fitted to (`source`,
said plainly) and the fit's record (`fit`: targets, achieved moments, and for a shape other than
gpt-oss-20b how the targets were scaled). gpt-oss-20b's is fitted to its real routing; every other
shape's to the same real moments scaled by shape (ecosim/routing/scale.py). Reports, benchmarks and
`ecosim synth` all take their knobs from `preset_knobs` (or `ecosim.synth.calibrated`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ecosim.catalog.models import ModelShape, shape_of
from ecosim.errors import EcoSimError
from ecosim.routing.generator import RoutingKnobs

PRESETS = Path(__file__).parent
KNOBS = ("token_affinity", "parent_affinity", "context", "skew", "context_share")


def preset_path(model: str) -> Path:
    return PRESETS / f"{model}.json"


def shipped() -> list[str]:
    """Catalogue names that have a shipped preset."""
    return sorted(p.stem for p in PRESETS.glob("*.json"))


def load_preset(path_or_model: str) -> dict[str, Any]:
    """A preset by catalogue model name (shipped) or by path."""
    p = Path(path_or_model)
    if not p.is_file():
        p = preset_path(path_or_model)
    if not p.is_file():
        raise EcoSimError(f"no synth preset {path_or_model!r} (shipped: {', '.join(shipped())})")
    try:
        d = json.loads(p.read_text())
        RoutingKnobs(**{k: d["knobs"][k] for k in KNOBS})
    except (ValueError, KeyError, TypeError) as e:
        raise EcoSimError(f"{p}: not a synth preset ({e})") from None
    return d


def knobs_of(preset: dict[str, Any]) -> dict[str, float]:
    return {k: float(preset["knobs"][k]) for k in KNOBS}


def preset_knobs(shape: ModelShape | str) -> RoutingKnobs:
    """The generator's knobs for a catalogue shape: its shipped preset plus its group limits (ModelShape.group_limits)."""
    m = shape_of(shape)
    n_group, topk_group = m.group_limits
    return RoutingKnobs(**knobs_of(load_preset(m.name)), n_group=n_group, topk_group=topk_group)


def preset_source(shape: ModelShape | str) -> str:
    """What the shape's preset was fitted to, as the manifest records it."""
    m = shape_of(shape)
    return f"preset {m.name}: {load_preset(m.name)['source']}"


def preset_hash(shape: ModelShape | str) -> str:
    """A short digest of the shape's preset file: caches of generated traces are keyed by it."""
    return hashlib.sha256(preset_path(shape_of(shape).name).read_bytes()).hexdigest()[:10]
