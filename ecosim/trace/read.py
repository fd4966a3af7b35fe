"""Reading trace directories: every invariant checked while the node rows stream in row-group
batches, so `check_trace` runs in bounded memory on traces larger than memory, and
`iter_request_chunks` replays one in pieces of whole requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ecosim.errors import EcoSimError
from ecosim.trace.arrays import ROW_GROUP, Trace, narrow_routing, routing_dtype
from ecosim.trace.checks import TraceChecker, TraceError, check_manifest
from ecosim.trace.schema import (
    MANIFEST,
    NODE_COLUMNS,
    NODES,
    POSITION_COLUMNS,
    POSITIONS,
    empty_nodes,
    experts_type,
    experts_width,
    gates_type,
)

def _load_manifest(path: Path) -> dict[str, Any]:
    f = path / MANIFEST
    if not path.exists():
        raise EcoSimError(f"{path}: no such trace directory")
    if not path.is_dir():
        raise EcoSimError(f"{path}: not a directory (a trace is a directory with {MANIFEST})")
    if not f.is_file():
        raise TraceError(f"{path}/{MANIFEST}", "missing (not a trace directory)")
    try:
        m = json.loads(f.read_bytes())
    except RecursionError:
        raise TraceError(f"{path}/{MANIFEST}", "not valid JSON (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise TraceError(f"{path}/{MANIFEST}", f"not valid JSON ({str(e).splitlines()[0]})") from None
    return m


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A trace's manifest alone, checked against its declaration (the gate): for a cheap look before any work,
    and the manifest every path that does not read the whole trace (`replay --max-memory`, `sweep`) prices with."""
    path = Path(path)
    manifest = _load_manifest(path)
    try:
        check_manifest(manifest)
    except TraceError as e:
        raise _prefixed(path, e) from None
    return manifest


def _parquet(path: Path, name: str, **options: Any) -> pq.ParquetFile:
    f = path / name
    if not f.is_file():
        raise TraceError(f"{path}/{name}", "missing")
    try:
        return pq.ParquetFile(f, **options)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise TraceError(f"{path}/{name}", f"not a readable Parquet file ({str(e).splitlines()[0][:200]})") from None


def node_file(path: str | Path) -> pq.ParquetFile:
    """A trace's nodes.parquet opened (footer and schema read, no rows), or one line saying why it cannot be."""
    return _parquet(Path(path), NODES)


def _check_schema(where: str, schema: pa.Schema, want: dict[str, pa.DataType]) -> None:
    for col, t in want.items():
        i = schema.get_field_index(col)
        if len(schema.get_all_field_indices(col)) > 1:
            raise TraceError(where, "more than one column of this name", column=col)
        if i < 0:
            raise TraceError(where, "missing column", column=col)
        if schema.field(i).type != t:
            raise TraceError(where, f"has type {schema.field(i).type}, expected {t}", column=col)


def _node_types(manifest: dict[str, Any], schema: pa.Schema) -> dict[str, pa.DataType]:
    width = experts_width(manifest["model"])
    want = dict(NODE_COLUMNS, experts=experts_type(width))
    if schema.get_all_field_indices("gates"):
        want["gates"] = gates_type(width)
    return want


def _to_numpy(batch: pa.RecordBatch | pa.Table, width: int, where: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name in batch.schema.names:
        col = batch.column(name)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if col.null_count:
            raise TraceError(where, "null values", column=name)
        if pa.types.is_fixed_size_list(col.type):
            flat = col.flatten() if col.offset else col.values
            if flat.null_count:  # a null inside a node's list would become NaN in a float array
                raise TraceError(where, "null values inside the lists", column=name)
            out[name] = flat.to_numpy(zero_copy_only=False).reshape(-1, width)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out


def _read_positions(path: Path) -> dict[str, np.ndarray]:
    pf = _parquet(path, POSITIONS)
    _check_schema(f"{path}/{POSITIONS}", pf.schema_arrow, POSITION_COLUMNS)
    try:
        table = pf.read(columns=list(POSITION_COLUMNS))
    except (OSError, pa.ArrowException, ValueError) as e:
        raise TraceError(f"{path}/{POSITIONS}", f"unreadable ({str(e).splitlines()[0][:200]})") from None
    return _to_numpy(table, 1, f"{path}/{POSITIONS}")


DECODE_ROWS = 1024  # node rows decoded at a time (iter_node_batches)


def iter_node_batches(path: Path, manifest: dict[str, Any], batch_rows: int = ROW_GROUP) -> Iterator[dict[str, np.ndarray]]:
    """Node rows in file order as numpy batches: the way to read a trace larger than memory.

    Decoded DECODE_ROWS rows at a time, on this thread, without buffering the file ahead: a
    row group's routing list decodes through level and int32 buffers several times its int16
    size, which, a whole row group at a time on several threads, made reading a trace's peak
    memory about twice the trace's arrays."""
    pf = _parquet(path, NODES, pre_buffer=False)
    want = _node_types(manifest, pf.schema_arrow)
    _check_schema(f"{path}/{NODES}", pf.schema_arrow, want)
    width = experts_width(manifest["model"])
    try:
        for batch in pf.iter_batches(batch_size=max(1, min(batch_rows, DECODE_ROWS)), columns=list(want), use_threads=False):
            yield _to_numpy(batch, width, NODES)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise TraceError(f"{path}/{NODES}", f"unreadable ({str(e).splitlines()[0][:200]})") from None


def _prefixed(path: Path, err: TraceError) -> TraceError:
    if err.file.startswith(str(path)):
        return err
    return TraceError(f"{path}/{err.file}", err.detail, err.row, err.column)


def _checked(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], TraceChecker]:
    manifest = _load_manifest(path)
    try:
        check_manifest(manifest)
    except TraceError as e:
        raise _prefixed(path, e) from None
    positions = _read_positions(path)
    try:
        checker = TraceChecker(manifest, positions)
    except TraceError as e:
        raise _prefixed(path, e) from None
    return manifest, positions, checker


def read_positions(path: str | Path) -> dict[str, np.ndarray]:
    """A trace's positions table checked against its manifest (no node rows read): what a plan needs up front."""
    path = Path(path)
    _, positions, _ = _checked(path)
    return positions


def check_trace(path: str | Path) -> dict[str, Any]:
    """Validate a trace directory in bounded memory; return its manifest, or raise TraceError."""
    path = Path(path)
    manifest, _, checker = _checked(path)
    try:
        for batch in iter_node_batches(path, manifest):
            checker.feed(batch)
        checker.finish()
    except TraceError as e:
        raise _prefixed(path, e) from None
    return manifest


def read_trace(path: str | Path, *, validate: bool = True, gates: bool = True) -> Trace:
    """Load a whole trace into numpy arrays, checking every invariant on the way.

    `gates=False` checks the gate weights (when validating) but does not keep them: no replay reads
    them, and at four bytes per id they would take four times the routing's memory."""
    path = Path(path)
    manifest, positions, checker = _checked(path)
    rows = int(positions["n_nodes"].astype(np.int64).sum())
    stored = _parquet(path, NODES).metadata.num_rows
    if rows != stored:  # before allocating: a corrupt count must not size an array
        raise TraceError(f"{path}/{POSITIONS}", f"n_nodes add up to {rows} rows but nodes.parquet has {stored}", column="n_nodes")
    nodes: dict[str, np.ndarray] = {}
    num_experts = int(manifest["model"]["num_experts"])
    filled = 0
    try:
        for batch in iter_node_batches(path, manifest):
            if validate:
                checker.feed(batch)
            n = len(batch["node"])
            if filled + n > rows:
                raise TraceError(f"{path}/{NODES}", "more node rows than the trees of positions.parquet hold", filled + n - 1)
            for k, v in batch.items():  # fill preallocated arrays: no second copy of the trace
                if k == "gates" and not gates:
                    continue
                if k == "experts":  # in the narrowest type that holds every id (routing_dtype)
                    v = narrow_routing(v, num_experts)
                    if k in nodes and nodes[k].dtype.itemsize < v.dtype.itemsize:  # an unchecked id beyond the model's
                        nodes[k] = nodes[k].astype(v.dtype)
                if k not in nodes:
                    nodes[k] = np.empty((rows, *v.shape[1:]), dtype=v.dtype)
                nodes[k][filled : filled + n] = v
            filled += n
        if validate:
            checker.finish()
    except TraceError as e:
        raise _prefixed(path, e) from None
    if filled < rows:
        raise TraceError(f"{path}/{POSITIONS}", f"n_nodes add up to {rows} rows but nodes.parquet has {filled}", column="n_nodes")
    if not nodes:
        nodes = empty_nodes(experts_width(manifest["model"]))
    pa.default_memory_pool().release_unused()  # the decoded batches' memory: arrow's allocator keeps it otherwise
    return Trace(path, manifest, positions, nodes)


def row_bytes(manifest: dict[str, Any], gates: bool) -> int:
    """Bytes of one node row in memory: the scalar columns plus the expert (and gate) lists, the
    experts in the type a Trace holds them in (`routing_dtype`)."""
    width = experts_width(manifest["model"])
    scalars = sum(t.byte_width for t in NODE_COLUMNS.values())
    ids = routing_dtype(int(manifest["model"]["num_experts"])).itemsize
    return scalars + width * ids + (width * 4 if gates else 0)


def iter_request_chunks(path: str | Path, max_rows: int, gates: bool = True) -> Iterator[Trace]:
    """The trace as sub-traces of whole requests, each holding at most `max_rows` node rows
    (`gates=False`: without the gate weights, checked all the same; see `read_trace`).

    Every invariant is checked on the way (the checker keeps only per-tree root arrays), so a
    trace larger than memory is validated and replayed in pieces. A single request larger than
    `max_rows` is an error: requests are the unit a replay cannot split without changing it.
    """
    path = Path(path)
    manifest, positions, checker = _checked(path)
    req = positions["request_id"]
    rows_per_tree = positions["n_nodes"].astype(np.int64)
    cuts = np.flatnonzero(np.diff(req)) + 1
    bounds = np.concatenate([[0], cuts, [len(req)]]).astype(np.int64)
    tree_rows = np.concatenate([[0], np.cumsum(rows_per_tree)])
    groups: list[tuple[int, int]] = []  # (first tree, end tree) per chunk
    for a, b in zip(bounds[:-1], bounds[1:]):
        size = int(tree_rows[b] - tree_rows[a])
        if size > max_rows:
            raise EcoSimError(
                f"{path}: request {int(req[a])} alone has {size} node rows, more than the {max_rows} the memory budget allows"
            )
        if groups and tree_rows[b] - tree_rows[groups[-1][0]] <= max_rows:
            groups[-1] = (groups[-1][0], int(b))
        else:
            groups.append((int(a), int(b)))
    by_id = {int(r["request_id"]): r for r in manifest["requests"]}
    pending: list[dict[str, np.ndarray]] = []
    have = 0
    batches = iter_node_batches(path, manifest, batch_rows=max(1, min(max_rows, ROW_GROUP)))
    try:
        for first, end in groups:
            need = int(tree_rows[end] - tree_rows[first])
            while have < need:
                batch = next(batches, None)
                if batch is None:  # nodes.parquet ends early: the checker names the unfinished tree
                    checker.finish()
                    raise TraceError(NODES, "ends before the trees of positions.parquet do")
                checker.feed(batch)
                pending.append(batch if gates else {k: v for k, v in batch.items() if k != "gates"})
                have += len(batch["node"])
            joined = {k: np.concatenate([b[k] for b in pending]) for k in pending[0]}
            chunk = {k: v[:need] for k, v in joined.items()}
            rest = {k: v[need:] for k, v in joined.items()}
            pending, have = ([rest], have - need) if have > need else ([], 0)
            ids = sorted({int(x) for x in req[first:end]})
            sub = dict(manifest, requests=[by_id[i] for i in ids])
            yield Trace(path, sub, {k: v[first:end] for k, v in positions.items()}, chunk)
        for batch in batches:
            checker.feed(batch)
        checker.finish()
    except TraceError as e:
        raise _prefixed(path, e) from None


def scan_nodes(path: str | Path) -> pl.LazyFrame:
    """A lazy Polars scan of the node rows (unvalidated: run `check_trace` first)."""
    return pl.scan_parquet(Path(path) / NODES)


def find_traces(paths: list[str | Path]) -> list[Path]:
    """Each path is a trace, or a directory whose subdirectories (recursively) hold traces."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise EcoSimError(f"{p}: no such file or directory")
        if (p / MANIFEST).is_file():
            found.append(p)
            continue
        if not p.is_dir():
            raise EcoSimError(f"{p}: not a trace directory")
        under = sorted(m.parent for m in p.rglob(MANIFEST) if not any(part.startswith(".") for part in m.relative_to(p).parts))
        if not under:
            raise EcoSimError(f"{p}: no traces under it (a trace is a directory with {MANIFEST})")
        found.extend(under)
    return found
