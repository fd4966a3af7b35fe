"""Reading the files of routing dumps: each failure is one line naming the file (no pickle, ever)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError

MAX_JSON_BYTES = 2 << 30


def bad(path: Path, why: str) -> EcoSimError:
    return EcoSimError(f"{path}: {why}")


def int_array(x: Any, path: Path, what: str, ndim: int) -> np.ndarray:
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):
        raise bad(path, f"{what} is not a rectangular array") from None
    if a.dtype == object or a.ndim != ndim or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise bad(path, f"{what} must be a {ndim}-d integer array, got {a.ndim}-d {a.dtype}")
    return a.astype(np.int64)


def load_json(path: Path) -> Any:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise bad(path, "JSON larger than 2 GiB; split it")
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise bad(path, f"not valid JSON ({str(e).splitlines()[0][:120]})") from None


def load_npz(path: Path) -> Any:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise bad(path, f"not a numpy file readable without pickle ({str(e).splitlines()[0][:120]})") from None
