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

from ecosim.catalog.models import MODELS, ModelShape, shape_of
from ecosim.errors import EcoSimError
from ecosim.routing.generator import RoutingKnobs

PRESETS = Path(__file__).parent
KNOBS = ("token_affinity", "parent_affinity", "context", "skew", "context_share")


def preset_path(model: str) -> Path:
    return PRESETS / f"{model}.json"


def shipped() -> list[str]:
    """Catalogue names that have a shipped preset."""
    return sorted(p.stem for p in PRESETS.glob("*.json"))


def shipped_preset(shape: ModelShape | str) -> str | None:
    """The shipped preset a shape routes with, or None: its catalogue name's, where the shape routes like that
    catalogue shape (the same experts, top-k and group limits). A config.json folder that happens to be named
    like a catalogue shape but is another model gets None, not that shape's preset. The one place this is
    decided (synth, fidelity and the benchmarks ask here)."""
    m = shape_of(shape)
    cat = MODELS.get(m.name)
    if cat is None or not preset_path(m.name).is_file():
        return None
    return m.name if (m.num_experts, m.top_k, m.group_limits) == (cat.num_experts, cat.top_k, cat.group_limits) else None


def load_preset(path_or_model: str) -> dict[str, Any]:
    """A preset by catalogue model name (shipped) or by path."""
    p = Path(path_or_model)
    if not p.is_file():
        p = preset_path(path_or_model)
    if not p.is_file():
        raise EcoSimError(f"no synth preset {path_or_model!r} (shipped: {', '.join(shipped())})")
    try:
        d = json.loads(p.read_text())
        k = RoutingKnobs(**{k: float(d["knobs"][k]) for k in KNOBS})
        str(d["source"])  # what it was fitted to: every preset says
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise EcoSimError(f"{p}: not a synth preset ({type(e).__name__}: {e})") from None
    if min(k.token_affinity, k.parent_affinity, k.context, k.skew, k.context_share) < 0 or k.context_share > 1 \
            or k.token_affinity + k.parent_affinity > 1:
        raise EcoSimError(f"{p}: knobs out of range (each >= 0, context_share <= 1, token + parent affinity <= 1)")
    return d


def knobs_of(preset: dict[str, Any]) -> dict[str, float]:
    return {k: float(preset["knobs"][k]) for k in KNOBS}


def _shipped(shape: ModelShape | str) -> str:
    name = shipped_preset(shape)
    if name is None:
        raise EcoSimError(f"no shipped routing preset for the shape {shape_of(shape).name!r}: fit one with "
                          "`ecosim synth --model MODEL --calibrate ROUTING OUT` and pass it as --preset")
    return name


def preset_knobs(shape: ModelShape | str) -> RoutingKnobs:
    """The generator's knobs for a catalogue shape: its shipped preset plus its group limits (ModelShape.group_limits)."""
    n_group, topk_group = shape_of(shape).group_limits
    return RoutingKnobs(**knobs_of(load_preset(_shipped(shape))), n_group=n_group, topk_group=topk_group)


def preset_source(shape: ModelShape | str) -> str:
    """What the shape's preset was fitted to, as the manifest records it."""
    name = _shipped(shape)
    return f"preset {name}: {load_preset(name)['source']}"


def preset_hash(shape: ModelShape | str) -> str:
    """A short digest of the shape's preset file: caches of generated traces are keyed by it."""
    return hashlib.sha256(preset_path(_shipped(shape)).read_bytes()).hexdigest()[:10]
