"""The published-measurements table (catalog/data/published.json): its rows read and checked.

A row is one published measurement (its URL, quote, engine, version and date) and, where the simulator can
reproduce its setting, `sim`: the model shape, hardware, placement, dtype and context it is priced at (see
ecosim/fidelity/__init__.py for what each `sim` key means). `release` names the engine-release serving profile
(catalog/data/serving/) its engine and version select, or its date where the source states no version.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ecosim.catalog.models import get_model, in_catalogue
from ecosim.catalog.serving import ServingProfile, shipped
from ecosim.errors import EcoSimError
from ecosim.fidelity_sampled import check_temperatures
from ecosim.routing.presets import load_preset

PUBLISHED = Path(__file__).parent.parent / "catalog" / "data" / "published.json"
PLAIN = ("decode_tok_s", "decode_ms_per_token")
# step_ratio: a forward of `sim.tokens` consecutive tokens over a forward of one (llama-bench pp with n_ubatch = n):
# how a verification step's time grows with its tokens, the draft left out.
METRICS = (*PLAIN, "spec_speedup", "spec_tok_s", "verify_step_ratio", "step_ratio")


def load_rows(path: Path = PUBLISHED) -> list[dict[str, Any]]:
    """The published rows, each checked: a URL, a known metric, a positive value, serving terms a profile has."""
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EcoSimError(f"{path}: not a published-measurements table ({e})") from None
    terms = {f.name for f in dataclasses.fields(ServingProfile)} - {"name", "source", "sources", "fitted_on"}
    profiles = shipped()
    for r in rows:
        sim = r.get("sim") or {}
        if not str(r.get("url", "")).startswith("http") or r.get("metric") not in METRICS:
            raise EcoSimError(f"{path}: row {r.get('id')!r} needs an http(s) url and a metric in {', '.join(METRICS)}")
        if not isinstance(r.get("value"), (int, float)) or r["value"] <= 0:
            raise EcoSimError(f"{path}: row {r['id']!r}: value must be a positive number")
        if "separate" in r and (not isinstance(r["separate"], str) or not r["separate"].strip() or r.get("fit")):
            raise EcoSimError(f"{path}: row {r['id']!r}: separate must say why, quoting the source, and a separate row cannot be fitted")
        serving = sim.get("serving", {})
        if not isinstance(serving, dict) or set(serving) - terms:
            raise EcoSimError(f"{path}: row {r['id']!r}: sim.serving must be an object of serving-profile terms ({', '.join(sorted(terms))})")
        try:  # its values checked as a profile's are
            ServingProfile.from_dict({"name": f"row {r['id']}", **serving})
        except TypeError:
            raise EcoSimError(f"{path}: row {r['id']!r}: sim.serving values must be numbers (spec_overlap true or false)") from None
        if sim:
            _locate(sim, path, r["id"])
        nodes = sim.get("nodes", 1)
        if not isinstance(nodes, int) or nodes < 1:
            raise EcoSimError(f"{path}: row {r['id']!r}: sim.nodes must be a whole number >= 1")
        release = r.get("release")
        if release is not None and (release not in profiles or sim.get("profile", release) != release):
            raise EcoSimError(f"{path}: row {r['id']!r}: release must name a shipped serving profile ({', '.join(profiles)})"
                              " and agree with its sim.profile")
    check_temperatures(rows, path)
    return rows


def _locate(sim: dict[str, Any], table: Path, row_id: str) -> None:
    """Check a row's sim.model and sim.preset, and record where they are. A catalogue name stays itself;
    anything else is a path relative to the table's folder (never the working directory), resolved into
    `_model` / `_preset` (kept apart, so what prints is what the table says) and read now, so a bad one is
    one line naming the table and the row before any pricing."""
    where = f"{table}: row {row_id!r}"
    for key in ("model", "preset"):
        v = sim.get(key)
        if key == "preset" and v is None:
            continue
        if not isinstance(v, str) or not v:
            raise EcoSimError(f"{where}: sim.{key} must be a catalogue name or a path")
        if key == "model" and in_catalogue(v):
            continue
        p = Path(v) if Path(v).is_absolute() else table.parent / v
        if not p.exists():
            raise EcoSimError(f"{where}: sim.{key} {v!r}: no such file or folder beside the table ({p})")
        sim["_" + key] = str(p.resolve())
        try:
            get_model(sim["_model"]) if key == "model" else load_preset(sim["_preset"])
        except EcoSimError as e:
            raise EcoSimError(f"{where}: {e}") from None


def _model(sim: dict[str, Any]) -> str:
    return sim.get("_model", sim["model"])


def model_label(sim: dict[str, Any]) -> str:
    """The row's model as tables print it: the shape's name (a config.json's folder name, not its path)."""
    return get_model(_model(sim)).name

