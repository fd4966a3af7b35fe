"""The traces the reader fuzzers start from and the files they damage: a small valid base trace (conftest.TINY's
shape) as numpy columns and as the bytes of its three files, its Parquet encoding (also under random writer
options), a `Case` (the three files of one generated trace) and `lay_out`, which writes a case to disk, special
files included. The mutation kinds: tests/fuzz_kinds.py; the tests: tests/test_fuzz_readers.py and
tests/test_fuzz_commands.py.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import TINY, tiny_trace


MANIFEST, POSITIONS, NODES = "manifest.json", "positions.parquet", "nodes.parquet"
FILES = (MANIFEST, POSITIONS, NODES)

# The shape of the base traces (conftest.TINY): 3 MoE layers x top-2 of 8 experts, vocabulary 500.
E, K, L, VOCAB = TINY.num_experts, TINY.top_k, len(TINY.moe_layers), TINY.vocab_size
W = L * K

POS_TYPES = {"request_id": pa.int32(), "pos": pa.int32(), "context_len": pa.int32(), "n_nodes": pa.int16()}
NODE_TYPES = {
    "request_id": pa.int32(), "pos": pa.int32(), "node": pa.int16(), "parent": pa.int16(), "depth": pa.int8(),
    "token": pa.int32(), "draft_logprob": pa.float32(), "target_next": pa.int32(), "target_logprob": pa.float32(),
}
LIST_TYPES = {"experts": pa.int16(), "gates": pa.float32()}
# =============================================================================== building cases


class Base:
    """A small valid trace, as numpy columns and as the bytes of its three files."""

    def __init__(self, seed: int, gates: bool):
        self.manifest, self.positions, self.nodes = tiny_trace(seed, requests=2, positions=6, depth=3, topk=2,
                                                               max_nodes=5, gates=gates)
        self.manifest = {"format": "ecosim-trace", "version": 1, **self.manifest}
        # Request 0 carries its prompt (context_len = prompt length + pos); request 1 does not.
        self.manifest["requests"][0]["prompt_ids"] = [(7 * j) % VOCAB for j in range(int(self.positions["context_len"][0]))]
        self.gates = gates
        self.bytes = {MANIFEST: json.dumps(self.manifest).encode(), POSITIONS: encode(pos_cols(self.positions)),
                      NODES: encode(node_cols(self.nodes))}
        starts = np.concatenate([[0], np.cumsum(self.positions["n_nodes"])])
        self.tree_start = starts  # row of each tree's root, and the row count at the end
        self.roots = starts[:-1]


def pos_cols(p: dict[str, np.ndarray]) -> dict[str, pa.Array]:
    return {k: pa.array(np.asarray(p[k]), type=t) for k, t in POS_TYPES.items()}


def _list(a: np.ndarray, t: pa.DataType, width: int) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(a).reshape(-1), type=t), width)


def node_cols(n: dict[str, np.ndarray]) -> dict[str, pa.Array]:
    cols = {k: pa.array(np.asarray(n[k]), type=t) for k, t in NODE_TYPES.items()}
    for k, t in LIST_TYPES.items():
        if n.get(k) is not None:
            cols[k] = _list(n[k], t, np.asarray(n[k]).shape[1])
    return cols


def encode(cols: dict[str, pa.Array], rng: np.random.Generator | None = None) -> bytes:
    """Parquet bytes of the columns; with `rng`, under random (valid) writer options."""
    buf = io.BytesIO()
    table = pa.table(cols)
    if rng is None:
        pq.write_table(table, buf, compression="zstd")
    else:
        pq.write_table(
            table, buf, compression=str(rng.choice(["none", "snappy", "zstd", "gzip", "lz4", "brotli"])),
            row_group_size=int(rng.choice([1, 3, 7, 16, 64, 10**6])), use_dictionary=bool(rng.random() < 0.5),
            write_statistics=bool(rng.random() < 0.5), data_page_size=int(rng.choice([64, 1024, 1 << 20])),
            version=str(rng.choice(["1.0", "2.4", "2.6"])),
        )
    return buf.getvalue()


class Case:
    """The three files of one generated trace (None: absent; a str: a special file, see `lay_out`)."""

    def __init__(self, base: Base, files: dict[str, Any] | None = None, damaged: str | None = None,
                 must_fail: bool = False, what: str = "", raw: bool = False):
        self.files = dict(base.bytes, **(files or {}))
        self.damaged, self.must_fail, self.what = damaged, must_fail, what
        self.raw = raw  # bytes damaged below the data: a reader may refuse metadata pyarrow tolerates


def lay_out(case: Case, path: Path) -> None:
    """Write the case's files into `path` (a directory reused between cases)."""
    path.mkdir(exist_ok=True)
    for name in FILES:
        f = path / name
        if f.is_symlink() or f.is_file() or f.is_fifo():
            f.unlink()
        elif f.is_dir():
            f.rmdir()
        data = case.files[name]
        if data is None:
            continue
        if data == "dir":
            f.mkdir()
        elif data == "fifo":
            os.mkfifo(f)
        elif data == "devzero":
            f.symlink_to("/dev/zero")
        elif data == "dangling":
            f.symlink_to(path / "no-such-target")
        else:
            f.write_bytes(data)


def _copy(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: (None if v is None else np.array(v, copy=True)) for k, v in d.items()}


def _manifest_case(base: Base, m: Any, what: str, must_fail: bool = False) -> Case:
    return Case(base, {MANIFEST: json.dumps(m, allow_nan=True).encode()}, MANIFEST, must_fail, what)


def _nodes_case(base: Base, n: dict[str, np.ndarray], what: str, must_fail: bool = False, rng=None) -> Case:
    return Case(base, {NODES: encode(node_cols(n), rng)}, NODES, must_fail, what)


def _pos_case(base: Base, p: dict[str, np.ndarray], what: str, must_fail: bool = False) -> Case:
    return Case(base, {POSITIONS: encode(pos_cols(p))}, POSITIONS, must_fail, what)


def _child_row(rng, base: Base) -> int:
    roots = set(base.roots.tolist())
    rows = [r for r in range(int(base.tree_start[-1])) if r not in roots]
    return int(rng.choice(rows))


def _tree_of(base: Base, row: int) -> tuple[int, int]:
    t = int(np.searchsorted(base.tree_start, row, side="right")) - 1
    return int(base.tree_start[t]), int(base.tree_start[t + 1])
