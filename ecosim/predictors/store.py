"""Predictor files: one `.npz` (numpy arrays, no pickle) with a JSON header stored as bytes.

    meta      uint8 array: UTF-8 JSON {format: "ecosim-predictor", version: 1, kind, shape,
              selection, config, training: {holdout, seed, rows, seconds, traces: [{name, path,
              fingerprint, synthetic, train_requests, heldout_requests}]}}
    <arrays>  the kind's arrays (freq: prior; token: tokens, n, ids, counts, prior;
              context: the token arrays, vocab and param_*)

Written to a temporary sibling and renamed into place; read with `allow_pickle=False`.
"""

from __future__ import annotations

import json
import os
import uuid
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ecosim import gate
from ecosim.errors import EcoSimError
from ecosim.gate.profiles import PREDICTOR
from ecosim.predictors.base import ScoringPredictor, Selection, Shape

FORMAT = "ecosim-predictor"
VERSION = 1


def _classes() -> dict[str, type]:
    from ecosim.predictors.context import ContextPredictor
    from ecosim.predictors.freq import FreqPredictor
    from ecosim.predictors.token import TokenPredictor

    return {"freq": FreqPredictor, "token": TokenPredictor, "context": ContextPredictor}


def save(path: str | Path, pred: ScoringPredictor, training: dict[str, Any]) -> Path:
    dest = Path(path)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "kind": pred.kind,  # type: ignore[attr-defined]
        "shape": pred.shape.to_dict(),
        "selection": pred.selection.to_dict(),
        "config": pred.config(),  # type: ignore[attr-defined]
        "training": training,
    }
    arrays = pred.arrays()  # type: ignore[attr-defined]
    if "meta" in arrays:
        raise ValueError("'meta' is reserved")
    if dest.is_dir():
        raise EcoSimError(f"{dest}: is a directory; give a file name for the predictor")
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez_compressed(f, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
        os.replace(tmp, dest)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # the parent is not a directory: nothing was written
            pass
        raise EcoSimError(f"{dest}: could not write the predictor ({e.strerror or e})") from None
    pred.training = training
    pred.source = str(dest)
    return dest


def load(path: str | Path) -> ScoringPredictor:
    """A trained predictor from its file; a bad file is an EcoSimError naming it."""
    p = Path(path)
    if not p.exists():
        raise EcoSimError(f"{p}: no such predictor file")
    if not p.is_file():
        raise EcoSimError(f"{p}: not a file (a predictor is one .npz file from `ecosim predictor train`)")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise EcoSimError(f"{p}: not a predictor file ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") from None
    try:
        meta = json.loads(arrays.pop("meta").tobytes().decode())
    except (KeyError, ValueError, UnicodeDecodeError):
        raise EcoSimError(f"{p}: not a predictor file (no readable 'meta' header)") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise EcoSimError(f"{p}: not a predictor file (format is {meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("version") != VERSION:
        raise EcoSimError(f"{p}: predictor file version {meta.get('version')!r}; this ecosim reads version {VERSION}")
    gate.check(PREDICTOR, meta, p)  # the header's declared types (ecosim/gate/profiles.py)
    classes = _classes()
    kind = meta.get("kind")
    if kind not in classes:
        raise EcoSimError(f"{p}: unknown predictor kind {kind!r}; known: {', '.join(classes)}")
    try:
        shape = Shape(**meta["shape"])
        pred = classes[kind].from_arrays(shape, Selection.from_dict(meta["selection"]), arrays, meta["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise EcoSimError(f"{p}: damaged {kind} predictor ({type(e).__name__}: {e})") from None
    pred.training = meta.get("training")
    pred.source = str(p)
    return pred
