"""Writing trace directories: validated, then written atomically.

A write goes to a hidden sibling directory first and is then swapped into place in one rename
(`renameat2(RENAME_EXCHANGE)` on Linux), so a crash leaves the previous complete trace or none,
never a half-written one.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ecosim.errors import EcoSimError
from ecosim.trace.arrays import ROW_GROUP
from ecosim.trace.checks import TraceChecker
from ecosim.trace.schema import (
    FORMAT,
    MANIFEST,
    NODE_COLUMNS,
    NODES,
    POSITION_COLUMNS,
    POSITIONS,
    SAMPLED_VERSION,
    VERSION,
    experts_width,
    node_schema,
    position_schema,
)

def full_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with `format` and `version` first, as written."""
    rest = {k: v for k, v in manifest.items() if k not in ("format", "version")}
    rest.setdefault("synthetic", False)
    if not isinstance(rest.get("provenance"), dict):
        rest["provenance"] = {"kind": "synthetic" if rest["synthetic"] else "real", "source": ""}
    rest.setdefault("recorded_on", {})
    rest.setdefault("decoding", {"mode": "greedy"})
    sampled = isinstance(rest["decoding"], dict) and rest["decoding"].get("mode") == "sample"
    return {"format": FORMAT, "version": SAMPLED_VERSION if sampled else VERSION, **rest}


def _fixed_list(a: np.ndarray, dtype: Any, width: int) -> pa.FixedSizeListArray:
    flat = np.ascontiguousarray(a, dtype=dtype).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), width)


def _tables(manifest: dict[str, Any], positions: dict[str, np.ndarray], nodes: dict[str, np.ndarray]) -> tuple[pa.Table, pa.Table]:
    width = experts_width(manifest["model"])
    pos_cols = [pa.array(np.asarray(positions[k], dtype=t.to_pandas_dtype())) for k, t in POSITION_COLUMNS.items()]
    node_cols = [pa.array(np.asarray(nodes[k], dtype=t.to_pandas_dtype())) for k, t in NODE_COLUMNS.items()]
    node_cols.append(_fixed_list(nodes["experts"], np.int16, width))
    with_gates = nodes.get("gates") is not None
    if with_gates:
        node_cols.append(_fixed_list(nodes["gates"], np.float32, width))
    return (
        pa.Table.from_arrays(pos_cols, schema=position_schema()),
        pa.Table.from_arrays(node_cols, schema=node_schema(width, with_gates)),
    )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _is_trace_dir(path: Path) -> bool:
    try:
        return json.loads((path / MANIFEST).read_bytes()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _clean_stale(dest: Path) -> None:
    """Remove temporaries that a killed writer left beside `dest`."""
    for tmp in dest.parent.glob(f".{dest.name}.tmp-*"):
        try:
            pid = int(tmp.name.rsplit("-", 2)[-2])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError):
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:
            pass


def write_trace(
    path: str | Path,
    manifest: dict[str, Any],
    positions: dict[str, np.ndarray],
    nodes: dict[str, np.ndarray],
    *,
    validate: bool = True,
) -> Path:
    """Validate and write a trace directory atomically, replacing a previous trace at `path`."""
    dest = Path(path)
    manifest = full_manifest(manifest)
    if validate:
        checker = TraceChecker(manifest, {k: np.asarray(v) for k, v in positions.items()})
        checker.feed({k: np.asarray(v) for k, v in nodes.items() if v is not None})
        checker.finish()
    if dest.exists() and not (dest.is_dir() and (not any(dest.iterdir()) or _is_trace_dir(dest))):
        raise EcoSimError(f"{dest}: exists and is not a trace; refusing to overwrite it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(dest)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        pos_table, node_table = _tables(manifest, positions, nodes)
        pq.write_table(pos_table, tmp / POSITIONS, compression="zstd")
        pq.write_table(node_table, tmp / NODES, compression="zstd", row_group_size=ROW_GROUP)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        for f in (POSITIONS, NODES, MANIFEST):
            _fsync(tmp / f)
        _fsync(tmp)
        if not dest.exists():
            tmp.rename(dest)
        elif _exchange(tmp, dest):
            shutil.rmtree(tmp)  # now holds the previous trace
        else:
            old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old)
        _fsync(dest.parent)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EcoSimError(f"{dest}: could not write the trace ({e.strerror or e}); any previous trace is intact") from None
    return dest
