"""Fuzz the trace reader: 10,240 generated malformed traces, each refused in one line or provably valid.

tests/test_trace_format.py breaks one invariant at a time (a table of mutations, plus hypothesis
over single cells and whole-file damage). This file scales that up and widens the kinds: damaged
Parquet bytes (truncations, bit flips, footer damage, garbage, spliced files), wrong column types,
nulls (also inside the expert lists), out-of-range and repeated experts, cycles and orphans in the
trees, non-finite probabilities, inconsistent manifests (counts, names, versions, shapes), huge
counts, and files that are not files (directories, FIFOs, /dev/zero).

Every case is generated in-process from a small valid synthetic trace by a seeded mutation, then
read by one of the three readers (`check_trace`, `read_trace`, `iter_request_chunks`). The verdict
is compared with an independent, deliberately plain restatement of TRACE_FORMAT.md (`reference`):

- the reader refuses  <=> the reference finds the trace invalid, and a refusal is an `EcoSimError`
  whose message is one line naming the trace and the file at fault;
- anything else (another exception, a case over 5 s, a worker over its memory bound) fails.

Cases run in two worker processes (this file run as a script), each reporting its failures, its
slowest case and its peak resident memory. A sample of 50 refused cases then goes through the real
`ecosim check` in subprocesses: exit status 2, one line on stderr, no traceback.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a worker script
    sys.path.insert(0, str(HERE))

from conftest import ROOT, TINY, tiny_trace  # noqa: E402

SEED = 20261210
CASES = 10_240
WORKERS = 2
CASE_LIMIT_S = 5.0  # no single case may take more CPU seconds (CPU, not wall: other jobs on the machine do not count)
HANG_S = 6 * CASE_LIMIT_S  # wall seconds after which a case counts as hung
PEAK_RSS_LIMIT_MB = 1024  # a worker's peak resident memory, imports included
ADDRESS_SPACE_GB = 4  # RLIMIT_AS of a worker: an allocation past it fails inside the case
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


# =============================================================================== the reference
# A plain, row-by-row restatement of TRACE_FORMAT.md (plus the reader's documented sanity bounds:
# num_experts <= 32767, request ids int32, moe_layers x top_k fits an Arrow list). It shares no
# code with ecosim.trace; it is slow and obvious on purpose. None means valid.


def _int(x: Any) -> bool:
    return type(x) is int


def _finite_number(x: Any) -> bool:
    if type(x) not in (int, float):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def ref_manifest(m: Any) -> str | None:
    if not isinstance(m, dict):
        return "manifest is not an object"
    if m.get("format") != "ecosim-trace":
        return "format"
    if not _int(m.get("version")) or m["version"] not in (1, 2, 3):
        return "version"
    for key, typ in (("synthetic", bool), ("model", dict), ("draft", dict), ("tree", dict), ("decoding", dict),
                     ("requests", list), ("recorded_on", dict)):
        if type(m.get(key)) is not typ:
            return f"manifest key {key}"
    if m["version"] >= 2:
        p = m.get("provenance")
        if type(p) is not dict or p.get("kind") not in ("real", "hybrid", "synthetic") or type(p.get("source", "")) is not str:
            return "provenance"
        if (p["kind"] == "real") == m["synthetic"]:
            return "provenance vs synthetic"
    mo = m["model"]
    for key in ("name", "family"):
        if type(mo.get(key)) is not str:
            return f"model.{key}"
    for key in ("num_layers", "num_experts", "top_k", "num_shared_experts", "hidden_size", "moe_intermediate_size", "vocab_size"):
        if not _int(mo.get(key)):
            return f"model.{key}"
    for key in ("expert_bytes", "dense_bytes"):
        if not _finite_number(mo.get(key)):
            return f"model.{key}"
    layers = mo.get("moe_layers")
    if type(layers) is not list or not layers or not all(_int(x) for x in layers):
        return "model.moe_layers"
    if any(b <= a for a, b in zip(layers, layers[1:])) or layers[0] < 0 or layers[-1] >= mo["num_layers"]:
        return "model.moe_layers order"
    if not 1 <= mo["num_experts"] <= 32767 or not 1 <= mo["top_k"] <= mo["num_experts"]:
        return "model.num_experts/top_k"
    if len(layers) * mo["top_k"] > 2**31 - 1:
        return "model: moe_layers x top_k too wide"
    if min(mo["vocab_size"], mo["hidden_size"], mo["num_layers"], mo["moe_intermediate_size"]) < 1:
        return "model sizes"
    if mo["expert_bytes"] <= 0 or mo["dense_bytes"] < 0 or mo["num_shared_experts"] < 0:
        return "model bytes"
    dec = m["decoding"]
    if dec != {"mode": "greedy"}:  # else, from version 3, a sampled continuation under target-only verification
        if m["version"] < 3 or dec.get("mode") != "sample" or dec.get("verify") != "target-only" or \
                set(dec) - {"mode", "temperature", "top_p", "top_k", "seed", "verify"}:
            return "decoding"
        t, p, k, s = dec.get("temperature"), dec.get("top_p", 1.0), dec.get("top_k", 0), dec.get("seed")
        if not (_finite_number(t) and 0 < t <= 100 and _finite_number(p) and 0 < p <= 1 and _int(k) and 0 <= k <= 2**31 - 1
                and (s is None or (_int(s) and 0 <= s <= 2**64 - 1))):
            return "decoding values"
    # Ranges of the declaration (docs/TRACE_FORMAT.md's tables): sizes past any real model are unit slips.
    if max(mo["num_layers"], mo["num_experts"], mo["num_shared_experts"]) > 32767 or \
            max(mo["hidden_size"], mo["moe_intermediate_size"], mo["vocab_size"]) > 2**31 - 1:
        return "model size past its range"
    if max(mo["expert_bytes"], mo["dense_bytes"]) > 2**50:
        return "model bytes past 1 PiB"
    optional = {"kv_bytes_per_token": (0, 2**40, False), "bytes_per_param": (0, 8, True)}
    for key, (lo, hi, open_lo) in optional.items():
        if key in mo and not (_finite_number(mo[key]) and (mo[key] > lo if open_lo else mo[key] >= lo) and mo[key] <= hi):
            return f"model.{key}"
    if type(mo.get("source", "")) is not str or type(mo.get("act_quant", False)) is not bool:
        return "model.source/act_quant"
    d = m["draft"]
    if type(d.get("name")) is not str or d.get("kind") not in (None, "model", "early-exit", "mtp", "eagle3") or \
            type(d.get("source", "")) is not str:
        return "draft name/kind/source"
    for key, lo, hi in (("params", 0, 2**50), ("bytes", 0, 2**50), ("accept", 0, 1), ("accept_len", 0, 32767)):
        v = d.get(key)
        if v is not None and not (_finite_number(v) and lo <= v <= hi):
            return f"draft.{key}"
    if d.get("layers") is not None and not (_int(d["layers"]) and 1 <= d["layers"] <= 32767):
        return "draft.layers"
    t = m["tree"]
    for key, lo, hi in (("depth", 0, 127), ("topk", 1, 32766), ("max_nodes", 0, 32766)):
        if not (_int(t.get(key)) and lo <= t[key] <= hi):
            return f"tree.{key}"
    seen = set()
    for r in m["requests"]:
        if type(r) is not dict or not _int(r.get("request_id")) or type(r.get("task")) is not str or not _int(r.get("positions")):
            return "request entry"
        if r["positions"] < 0 or not 0 <= r["request_id"] <= 2**31 - 1 or r["request_id"] in seen:
            return "request ids/positions"
        seen.add(r["request_id"])
        ids = r.get("prompt_ids")
        if ids is not None and (type(ids) is not list or not all(_int(t) and 0 <= t < mo["vocab_size"] for t in ids)):
            return "prompt_ids"
    return None


def _columns(table: pa.Table, want: dict[str, pa.DataType]) -> dict[str, list] | str:
    names = table.schema.names
    out = {}
    for col, typ in want.items():
        if names.count(col) != 1:
            return f"column {col} missing or repeated"
        if table.schema.field(col).type != typ:
            return f"column {col} type"
        arr = table.column(col).combine_chunks()
        if arr.null_count or (pa.types.is_fixed_size_list(arr.type) and arr.flatten().null_count):
            return f"column {col} nulls"
        out[col] = arr.to_pylist()
    return out


def reference(path: Path) -> str | None:
    """Why the trace at `path` breaks TRACE_FORMAT.md, or None."""
    for name in FILES:
        if not (path / name).is_file():
            return f"{name} missing"
    try:
        m = json.loads((path / MANIFEST).read_bytes())
    except Exception:  # noqa: BLE001
        return "manifest unreadable"
    why = ref_manifest(m)
    if why:
        return why
    mo = m["model"]
    width, n_exp, k, vocab = len(mo["moe_layers"]) * mo["top_k"], mo["num_experts"], mo["top_k"], mo["vocab_size"]
    try:  # decoding only: a file pyarrow cannot decode (data, names, types) is unreadable
        pt = pq.read_table(path / POSITIONS)
        nt = pq.read_table(path / NODES)
        p = _columns(pt, POS_TYPES)
        if isinstance(p, str):
            return "positions " + p
        want = dict(NODE_TYPES, experts=pa.list_(pa.int16(), width))
        if "gates" in nt.schema.names:
            want["gates"] = pa.list_(pa.float32(), width)
        n = _columns(nt, want)
        if isinstance(n, str):
            return "nodes " + n
    except Exception:  # noqa: BLE001
        return "parquet unreadable"

    reqs = sorted(m["requests"], key=lambda r: r["request_id"])
    if len(p["pos"]) != sum(r["positions"] for r in reqs):  # before anything is sized by a count
        return "positions rows != manifest counts"
    expect = [(r["request_id"], i) for r in reqs for i in range(r["positions"])]
    prompt_len = {r["request_id"]: (len(r["prompt_ids"]) if r.get("prompt_ids") is not None else None) for r in reqs}
    offset: dict[int, int] = {}
    for row, (rid, pos) in enumerate(expect):
        if p["request_id"][row] != rid or p["pos"][row] != pos:
            return "positions order"
        if p["n_nodes"][row] < 1:
            return "n_nodes < 1"
        off = p["context_len"][row] - pos
        want_off = prompt_len[rid] if prompt_len[rid] is not None else offset.setdefault(rid, off)
        if off != want_off or off < 0:
            return "context_len"
    if len(n["node"]) != sum(p["n_nodes"]):
        return "node rows != sum(n_nodes)"
    row, prev = 0, None  # prev: (request, root target_next) of the previous tree
    for t in range(len(expect)):
        rid, pos, size = p["request_id"][t], p["pos"][t], p["n_nodes"][t]
        rows = range(row, row + size)
        depth: dict[int, int] = {}
        children: dict[int, set] = {}
        for r in rows:
            i = r - row
            if n["request_id"][r] != rid or n["pos"][r] != pos or n["node"][r] != i:
                return "node keys"
            par, d, tok, nxt = n["parent"][r], n["depth"][r], n["token"][r], n["target_next"][r]
            dlp, tlp = n["draft_logprob"][r], n["target_logprob"][r]
            if not (0 <= tok < vocab and 0 <= nxt < vocab):
                return "token range"
            if i == 0:
                if par != -1 or d != 0 or dlp != 0:
                    return "root"
            else:
                if not 0 <= par < i or d != depth[par] + 1:
                    return "parent/depth"
                if tok in children.setdefault(par, set()):
                    return "sibling tokens"
                children[par].add(tok)
                if not (math.isfinite(dlp) and dlp <= 0 and math.isfinite(tlp) and tlp <= 1e-4):
                    return "logprob"
            depth[i] = d
            ex = n["experts"][r]
            for layer in range(len(mo["moe_layers"])):
                chosen = ex[layer * k:(layer + 1) * k]
                if any(not 0 <= x < n_exp for x in chosen) or len(set(chosen)) != k:
                    return "experts"
            if "gates" in n and not all(math.isfinite(g) for g in n["gates"][r]):
                return "gates"
        root_tok, root_next = n["token"][row], n["target_next"][row]
        if prev is not None and prev[0] == rid and root_tok != prev[1]:
            return "continuity"
        prev = (rid, root_next)
        row += size
    return None


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


# ------------------------------------------------------------------ kinds: damaged Parquet bytes


def _parquet_file(rng) -> str:
    return POSITIONS if rng.random() < 0.35 else NODES


def k_truncate(rng, base):
    name = _parquet_file(rng)
    data = base.bytes[name]
    return Case(base, {name: data[: int(rng.integers(0, len(data)))]}, name, True, "truncated")


def k_bitflip(rng, base):
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    for _ in range(int(rng.integers(1, 9))):
        data[int(rng.integers(0, len(data)))] ^= int(rng.integers(1, 256))
    return Case(base, {name: bytes(data)}, name, False, "bytes flipped", raw=True)


def k_footer(rng, base):
    """Damage in the Thrift footer: where row counts, offsets and sizes live."""
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    footer = int.from_bytes(data[-8:-4], "little")
    lo = max(4, len(data) - 8 - footer)
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(lo, len(data) - 8))
        data[i] = int(rng.choice([0xFF, 0x7F, 0x80, 0x00, rng.integers(0, 256)]))
    return Case(base, {name: bytes(data)}, name, False, "footer damaged", raw=True)


def k_varint(rng, base):
    """A varint in the footer made huge: counts and sizes of 2^60 must not be allocated."""
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    footer = int.from_bytes(data[-8:-4], "little")
    lo = max(4, len(data) - 8 - footer)
    i = int(rng.integers(lo, len(data) - 8))
    run = int(rng.integers(1, 9))
    for j in range(i, min(i + run, len(data) - 8)):
        data[j] = 0xFF if j < i + run - 1 else 0x7F
    return Case(base, {name: bytes(data)}, name, False, "footer varint inflated", raw=True)


def k_footer_len(rng, base):
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    n = int(rng.choice([0, 1, 2**31 - 1, 2**32 - 1, len(data), len(data) - 7, int(rng.integers(0, 2**32))]))
    data[-8:-4] = n.to_bytes(4, "little")
    return Case(base, {name: bytes(data)}, name, False, "footer length", raw=True)


def k_garbage(rng, base):
    name = _parquet_file(rng)
    body = rng.integers(0, 256, int(rng.integers(0, 2 * len(base.bytes[name]))), dtype=np.uint8).tobytes()
    if rng.random() < 0.5:  # framed like Parquet, so the reader gets as far as the footer
        body = b"PAR1" + body + int(rng.integers(0, 2**32)).to_bytes(4, "little") + b"PAR1"
    return Case(base, {name: body}, name, True, "garbage")


def k_zero_range(rng, base):
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    a = int(rng.integers(0, len(data)))
    b = min(len(data), a + int(rng.integers(1, 64)))
    data[a:b] = bytes(b - a)
    return Case(base, {name: bytes(data)}, name, False, "range zeroed", raw=True)


def k_splice(rng, base):
    """Files from elsewhere: swapped, or another trace's, or junk around the real bytes."""
    how = int(rng.integers(0, 4))
    if how == 0:
        return Case(base, {POSITIONS: base.bytes[NODES], NODES: base.bytes[POSITIONS]}, None, True, "files swapped")
    if how == 1:
        other = tiny_trace(int(rng.integers(100, 10**6)), requests=2, positions=6, depth=3, topk=2, max_nodes=5)
        name = _parquet_file(rng)
        data = encode(pos_cols(other[1])) if name == POSITIONS else encode(node_cols(other[2]))
        return Case(base, {name: data}, name, False, "another trace's file")
    name = _parquet_file(rng)
    junk = rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
    data = junk + base.bytes[name] if how == 2 else base.bytes[name] + junk
    return Case(base, {name: data}, name, True, "junk prepended" if how == 2 else "junk appended")


# ------------------------------------------------------------------ kinds: tables


def k_wrong_type(rng, base):
    if rng.random() < 0.3:
        cols = pos_cols(base.positions)
        name, file = str(rng.choice(list(POS_TYPES))), POSITIONS
    else:
        cols = node_cols(base.nodes)
        name, file = str(rng.choice(list(cols))), NODES
    arr = cols[name]
    if pa.types.is_fixed_size_list(arr.type):
        flat, width = arr.values, arr.type.list_size
        choices = [
            lambda: pa.FixedSizeListArray.from_arrays(flat.cast(pa.int32(), safe=False), width),
            lambda: pa.FixedSizeListArray.from_arrays(flat.cast(pa.float64()), width),
            lambda: pa.ListArray.from_arrays(pa.array(np.arange(0, len(flat) + 1, width), pa.int32()), flat),
            lambda: pa.LargeListArray.from_arrays(pa.array(np.arange(0, len(flat) + 1, width), pa.int64()), flat),
            lambda: pa.FixedSizeListArray.from_arrays(flat[: len(flat) // (width - 1) * (width - 1)], width - 1),
            lambda: pa.FixedSizeListArray.from_arrays(pa.concat_arrays([flat, flat[: len(flat) // width]]), width + 1),
            lambda: flat[: len(arr)],
            lambda: pa.array([str(x) for x in arr.to_pylist()]),
        ]
        cols[name] = choices[int(rng.integers(0, len(choices)))]()
        n = len(cols[name])
        if n != len(arr):  # keep the table rectangular
            cols = {k: v[:n] if len(v) >= n else v for k, v in cols.items()}
            if any(len(v) != n for v in cols.values()):
                cols[name] = pa.FixedSizeListArray.from_arrays(flat.cast(pa.int64(), safe=False), width)
    else:
        targets = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32(), pa.float32(), pa.float64(),
                   pa.string(), pa.bool_(), pa.dictionary(pa.int32(), pa.string()), pa.decimal128(12, 3), pa.date32()]
        t = targets[int(rng.integers(0, len(targets)))]
        while t == arr.type:
            t = targets[int(rng.integers(0, len(targets)))]
        if pa.types.is_dictionary(t):
            cols[name] = pa.array([str(x) for x in arr.to_pylist()]).dictionary_encode()
        elif pa.types.is_date(t):
            cols[name] = pa.array(np.zeros(len(arr), np.int32)).cast(pa.date32())
        elif pa.types.is_decimal(t):
            cols[name] = pa.array([0] * len(arr), type=t)
        else:
            cols[name] = arr.cast(t, safe=False)
    return Case(base, {file: encode(cols)}, file, True, f"{file}:{name} as {cols[name].type}")


def k_drop_or_repeat_column(rng, base):
    if rng.random() < 0.3:
        cols, file = pos_cols(base.positions), POSITIONS
    else:
        cols, file = node_cols(base.nodes), NODES
    name = str(rng.choice(list(cols)))
    if rng.random() < 0.6:
        del cols[name]
        return Case(base, {file: encode(cols)}, file, name != "gates", f"{file}: no {name}")
    table = pa.table(cols)
    table = table.append_column(name, table.column(name))  # a second column of the same name
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return Case(base, {file: buf.getvalue()}, file, True, f"{file}: {name} twice")


def k_extra_and_reordered(rng, base):
    """Valid variants: columns reordered, extra columns, other writer options. Must be accepted."""
    cols = node_cols(base.nodes)
    order = list(cols)
    rng.shuffle(order)
    cols = {k: cols[k] for k in order}
    if rng.random() < 0.5:
        cols["note"] = pa.array(["x"] * len(cols["node"]))
    p = pos_cols(base.positions)
    if rng.random() < 0.5:
        p["extra"] = pa.array(np.arange(len(p["pos"]), dtype=np.float64))
    return Case(base, {NODES: encode(cols, rng), POSITIONS: encode(p, rng)}, None, False, "valid variant")


def k_nulls(rng, base):
    if rng.random() < 0.25:
        cols, file = pos_cols(base.positions), POSITIONS
    else:
        cols, file = node_cols(base.nodes), NODES
    name = str(rng.choice(list(cols)))
    arr = cols[name]
    values = arr.to_pylist()
    i = int(rng.integers(0, len(values)))
    if pa.types.is_fixed_size_list(arr.type) and rng.random() < 0.6:  # a null inside a node's list
        values[i] = list(values[i])
        values[i][int(rng.integers(0, len(values[i])))] = None
        what = f"{file}:{name} null element"
    else:
        values[i] = None
        what = f"{file}:{name} null"
    cols[name] = pa.array(values, type=arr.type)
    return Case(base, {file: encode(cols)}, file, True, what)


def k_expert_range(rng, base):
    n = _copy(base.nodes)
    row, slot = int(rng.integers(0, len(n["node"]))), int(rng.integers(0, W))
    n["experts"][row, slot] = int(rng.choice([E, E + 1, 32767, -1, -32768, rng.integers(E, 32768), rng.integers(-32768, 0)]))
    return _nodes_case(base, n, "expert out of range", True)


def k_expert_repeat(rng, base):
    n = _copy(base.nodes)
    row, layer = int(rng.integers(0, len(n["node"]))), int(rng.integers(0, L))
    a, b = rng.choice(K, 2, replace=False)
    n["experts"][row, layer * K + a] = n["experts"][row, layer * K + b]
    return _nodes_case(base, n, "expert repeated in a layer", True)


def k_cycle(rng, base):
    """A parent that is the node itself, a later node or one of its descendants."""
    n = _copy(base.nodes)
    row = _child_row(rng, base)
    lo, hi = _tree_of(base, row)
    node = int(n["node"][row])
    n["parent"][row] = int(rng.integers(node, max(node + 1, hi - lo)))
    return _nodes_case(base, n, "cycle", True)


def k_orphan(rng, base):
    """A child without its parent: a second root, a parent outside the tree, a row missing or doubled."""
    n = _copy(base.nodes)
    row = _child_row(rng, base)
    lo, hi = _tree_of(base, row)
    how = int(rng.integers(0, 6))
    if how == 0:
        n["parent"][row] = -1
    elif how == 1:
        n["parent"][row] = int(rng.choice([-2, -32768, hi - lo, 32767]))
    elif how in (2, 3):  # delete a row (and, for 3, make the counts agree: the orphans stay)
        keep = np.ones(len(n["node"]), bool)
        keep[row] = False
        n = {k: v[keep] for k, v in n.items() if v is not None}
        if how == 3:
            p = _copy(base.positions)
            t = int(np.searchsorted(base.tree_start, row, side="right")) - 1
            p["n_nodes"][t] -= 1
            sel = slice(lo, hi - 1)
            n["node"][sel] = np.arange(hi - 1 - lo, dtype=np.int16)
            return Case(base, {NODES: encode(node_cols(n)), POSITIONS: encode(pos_cols(p))}, NODES, False, "orphan: row removed")
    elif how == 4:  # a row doubled
        idx = np.insert(np.arange(len(n["node"])), row, row)
        n = {k: v[idx] for k, v in n.items() if v is not None}
    else:  # two rows of a tree swapped
        other = int(rng.choice([r for r in range(lo, hi) if r != row]))
        idx = np.arange(len(n["node"]))
        idx[[row, other]] = idx[[other, row]]
        n = {k: v[idx] for k, v in n.items() if v is not None}
    return _nodes_case(base, n, f"orphan {how}", True)


def k_depth(rng, base):
    n = _copy(base.nodes)
    row = int(rng.integers(0, len(n["node"])))
    n["depth"][row] = int(rng.choice([-1, -128, 127, n["depth"][row] + 1, n["depth"][row] - 1]))
    return _nodes_case(base, n, "depth", True)


def k_nonfinite(rng, base):
    n = _copy(base.nodes)
    cols = ["draft_logprob", "target_logprob"] + (["gates"] if base.gates else [])
    col = str(rng.choice(cols))
    value = float(rng.choice([np.nan, np.inf, -np.inf, 0.5, 1e30, -np.nan]))
    if col == "gates":
        n["gates"][int(rng.integers(0, len(n["node"]))), int(rng.integers(0, W))] = value
    else:
        n[col][_child_row(rng, base) if rng.random() < 0.85 else int(rng.choice(base.roots))] = value
    return _nodes_case(base, n, f"{col} = {value}")


def k_tokens(rng, base):
    n = _copy(base.nodes)
    how = int(rng.integers(0, 4))
    if how == 0:
        col = str(rng.choice(["token", "target_next"]))
        n[col][int(rng.integers(0, len(n["node"])))] = int(rng.choice([VOCAB, VOCAB + 1, 2**31 - 1, -1, -(2**31)]))
        return _nodes_case(base, n, f"{col} outside the vocabulary", True)
    if how == 1:  # two siblings with one token
        parents = n["parent"]
        for r in rng.permutation(len(parents)):
            lo, hi = _tree_of(base, int(r))
            sib = [s for s in range(lo, hi) if s != r and parents[s] == parents[r] and n["node"][r] != 0]
            if sib:
                n["token"][r] = n["token"][sib[0]]
                return _nodes_case(base, n, "sibling tokens", True)
    if how == 2:  # the continuation broken: a root that is not the previous root's target_next
        t = int(rng.integers(1, len(base.roots)))
        n["token"][base.roots[t]] = (int(n["token"][base.roots[t]]) + 1 + int(rng.integers(0, VOCAB - 1))) % VOCAB
        return _nodes_case(base, n, "continuity")
    n["target_next"][int(rng.choice(base.roots))] = int(rng.integers(0, VOCAB))
    return _nodes_case(base, n, "root target_next")


def k_positions(rng, base):
    p = _copy(base.positions)
    rows = len(p["pos"])
    i = int(rng.integers(0, rows))
    how = int(rng.integers(0, 7))
    if how == 0:
        p["n_nodes"][i] = int(rng.choice([0, -1, -32768, 32767, p["n_nodes"][i] + 1, p["n_nodes"][i] - 1]))
    elif how == 1:
        p["pos"][i] = int(rng.choice([-1, rows, 2**31 - 1, p["pos"][i] + 1]))
    elif how == 2:
        p["request_id"][i] = int(rng.choice([-1, 7, 2**31 - 1, 1 - p["request_id"][i]]))
    elif how == 3:
        p["context_len"][i] = int(rng.choice([-1, 0, 2**31 - 1, p["context_len"][i] + 1]))
    elif how == 4:
        keep = np.ones(rows, bool)
        keep[i] = False
        p = {k: v[keep] for k, v in p.items()}
    elif how == 5:
        idx = np.insert(np.arange(rows), i, i)
        p = {k: v[idx] for k, v in p.items()}
    else:
        idx = rng.permutation(rows)
        p = {k: v[idx] for k, v in p.items()}
    return _pos_case(base, p, f"positions {how}")


def k_empty_tables(rng, base):
    which = int(rng.integers(0, 3))
    files = {}
    if which in (0, 2):
        files[POSITIONS] = encode({k: v[:0] for k, v in pos_cols(base.positions).items()})
    if which in (1, 2):
        files[NODES] = encode({k: v[:0] for k, v in node_cols(base.nodes).items()})
    return Case(base, files, None, True, f"empty tables {which}")


def k_random_cells(rng, base):
    """1-4 cells of any node or position column set to arbitrary values of the column's type."""
    n, p = _copy(base.nodes), _copy(base.positions)
    for _ in range(int(rng.integers(1, 5))):
        table = p if rng.random() < 0.25 else n
        col = str(rng.choice([k for k, v in table.items() if v is not None]))
        a = table[col].reshape(-1)
        i = int(rng.integers(0, len(a)))
        if a.dtype.kind == "f":
            a[i] = float(rng.choice([rng.normal(), -rng.exponential(5), np.nan, np.inf, -np.inf, 0.0, 1e-3]))
        else:
            info = np.iinfo(a.dtype)
            a[i] = int(rng.choice([rng.integers(info.min, int(info.max) + 1), a[i] + 1, a[i] - 1, 0, -1, info.max]))
    return Case(base, {NODES: encode(node_cols(n)), POSITIONS: encode(pos_cols(p))}, None, False, "random cells")


# ------------------------------------------------------------------ kinds: manifests


def _paths(m: Any, prefix=()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(m, dict):
        for k, v in m.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(m, list) and len(m) <= 8:
        for i, v in enumerate(m):
            out += _paths(v, prefix + (i,))
    return out


ODD_VALUES = [None, True, False, 0, -1, 1, 2, 1.5, -0.0, float("nan"), float("inf"), 10**12, 10**30, 10**400, -(10**30),
              "", "x", "1", "ecosim-trace", [], [1], {}, {"a": 1}, "\u202e\u0000\n", "a" * 10_000]


def _set_path(m: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        m = m[k]
    if value is KeyError:
        del m[path[-1]]
    else:
        m[path[-1]] = value


def k_manifest_value(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    paths = _paths(m)
    path = paths[int(rng.integers(0, len(paths)))]
    value = KeyError if rng.random() < 0.15 else ODD_VALUES[int(rng.integers(0, len(ODD_VALUES)))]
    _set_path(m, path, value)
    return _manifest_case(base, m, f"manifest {'.'.join(map(str, path))} = {str(value)[:20]}")


def k_manifest_version(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    key = "version" if rng.random() < 0.7 else "format"
    value = [0, 4, -1, "1", 1.0, True, None, 10**20, [1], {"v": 1}, KeyError, "ecosim-trace-v2", "ECOSIM-TRACE"]
    v = value[int(rng.integers(0, len(value)))]
    _set_path(m, (key,), v)
    return _manifest_case(base, m, f"{key} = {v}", True)


def k_manifest_counts(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    reqs = m["requests"]
    how = int(rng.integers(0, 7))
    i = int(rng.integers(0, len(reqs)))
    if how == 0:
        reqs[i]["positions"] += int(rng.choice([1, -1, 5, -6]))
    elif how == 1:
        reqs[i]["positions"] = int(rng.choice([10**12, 2**31, 2**63, 10**40, -1]))  # huge counts: nothing allocated
    elif how == 2:
        reqs.append({"request_id": 2 + int(rng.integers(0, 5)), "task": "qa", "positions": int(rng.integers(0, 3))})
    elif how == 3:
        del reqs[i]
    elif how == 4:
        reqs[1 - i]["request_id"] = reqs[i]["request_id"]
    elif how == 5:
        reqs.reverse()  # order in the manifest does not matter: valid
    else:
        reqs[i]["request_id"] = int(rng.choice([-1, 2**31, 5, 2**31 - 1]))
    return _manifest_case(base, m, f"counts {how}")


def k_manifest_shape(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    mo = m["model"]
    how = int(rng.integers(0, 10))
    if how == 0:
        mo["num_experts"] = int(rng.choice([1, 2, E - 1, E + 1, 32767, 32768, 0, -8]))
    elif how == 1:
        mo["top_k"] = int(rng.choice([0, 1, K + 1, E, E + 1]))
    elif how == 2:
        mo["moe_layers"] = [list(reversed(mo["moe_layers"])), [0, 0, 1], [0, 1], [0, 1, 2, 3], [-1, 0, 1], [0, 1, 5], []][
            int(rng.integers(0, 7))]
    elif how == 3:
        mo["vocab_size"] = int(rng.choice([1, 10, VOCAB + 1, 2**31, 10**30, 0]))
    elif how == 4:
        mo["num_layers"] = int(rng.choice([0, 1, 2, 3, 10**12]))
    elif how == 5:
        mo["expert_bytes"] = [0, -1, float("nan"), float("inf"), 1e308, 10**400, "1MB", True][int(rng.integers(0, 8))]
    elif how == 6:
        mo["dense_bytes"] = [-1, float("-inf"), 10**400, None][int(rng.integers(0, 4))]
    elif how == 7:  # very wide nodes: moe_layers x top_k past what an Arrow list holds
        mo.update(num_experts=32767, top_k=32767, num_layers=10**6, moe_layers=list(range(int(rng.choice([3, 70_000])))))
    elif how == 8:
        m["decoding"] = [{"mode": "sample"}, {}, {"mode": None}, "greedy", None][int(rng.integers(0, 5))]
    else:
        mo["name"], mo["family"] = [("", ""), ("x" * 100_000, "qwen3_moe"), (None, "x"), ("n", 3), ("\u0000", "\U0001F600")][
            int(rng.integers(0, 5))]
    return _manifest_case(base, m, f"shape {how}")


def k_prompts(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    r = m["requests"][0]
    how = int(rng.integers(0, 6))
    if how == 0:
        r["prompt_ids"] = r["prompt_ids"] + [1]
    elif how == 1:
        r["prompt_ids"] = r["prompt_ids"][:-1]
    elif how == 2:
        r["prompt_ids"][int(rng.integers(0, len(r["prompt_ids"])))] = int(rng.choice([VOCAB, -1, 10**20]))
    elif how == 3:
        r["prompt_ids"] = ["1"] * len(r["prompt_ids"]) if rng.random() < 0.5 else "abc"
    elif how == 4:
        del r["prompt_ids"]  # allowed: context offsets then only need to be consistent
    else:
        r["prompt_ids"] = list(range(1, 10**6 % VOCAB)) * 2000  # a long prompt (1 M ids): does not fit the contexts
    return _manifest_case(base, m, f"prompts {how}")


def k_many_requests(rng, base):
    """Thousands of requests: empty ones are valid; one with positions is not."""
    m = json.loads(base.bytes[MANIFEST])
    n = int(rng.integers(100, 3000))
    m["requests"] += [{"request_id": 10 + i, "task": "qa", "positions": 0} for i in range(n)]
    if rng.random() < 0.5:
        m["requests"][-1]["positions"] = 1
    return _manifest_case(base, m, f"{n} more requests")


def k_manifest_bytes(rng, base):
    data = base.bytes[MANIFEST]
    how = int(rng.integers(0, 9))
    if how == 0:
        out = data[: int(rng.integers(0, len(data)))]
    elif how == 1:
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        out = bytes(b)
    elif how == 2:
        out = b"\xff\xfe" + data
    elif how == 3:
        out = b""
    elif how == 4:
        depth = int(rng.choice([10_000, 100_000, 1_000_000]))
        out = b"[" * depth + b"]" * depth  # nesting deeper than the JSON parser recurses
    elif how == 5:
        out = b'{"a": ' * 50_000 + b"1" + b"}" * 50_000
    elif how == 6:
        out = json.dumps(json.loads(data)).replace('"version": 1', '"version": 1' + "0" * 5000).encode()
    elif how == 7:
        out = data.replace(b'"synthetic": true', b'"synthetic": NaN')
    else:
        out = json.dumps([json.loads(data)], allow_nan=True).encode() if rng.random() < 0.5 else b"null"
    return Case(base, {MANIFEST: out}, MANIFEST, how not in (1,), f"manifest bytes {how}")


def k_not_files(rng, base):
    name = FILES[int(rng.integers(0, 3))]
    special = [None, "dir", "fifo", "devzero", "dangling"][int(rng.integers(0, 5))]
    return Case(base, {name: special}, name, True, f"{name} is {special or 'absent'}")


def k_combined(rng, base):
    """Two or three mutations of the nodes together."""
    n = _copy(base.nodes)
    for _ in range(int(rng.integers(2, 4))):
        col = str(rng.choice(["parent", "depth", "token", "target_next", "experts", "draft_logprob", "node"]))
        a = n[col].reshape(-1)
        i = int(rng.integers(0, len(a)))
        if a.dtype.kind == "f":
            a[i] = -float(rng.exponential(2))
        else:
            a[i] = int(np.clip(a[i] + rng.integers(-3, 4), np.iinfo(a.dtype).min, np.iinfo(a.dtype).max))
    return _nodes_case(base, n, "combined", False, rng)


KINDS: dict[str, Callable[[np.random.Generator, Base], Case]] = {
    name.removeprefix("k_"): fn for name, fn in list(globals().items()) if name.startswith("k_") and callable(fn)
}


_BASES: dict[bool, Base] = {}


def make_case(i: int) -> tuple[str, Case]:
    kind = list(KINDS)[i % len(KINDS)]
    rng = np.random.default_rng([SEED, i])
    gates = bool(rng.random() < 0.5)
    if gates not in _BASES:
        _BASES[gates] = Base(11, gates)
    return kind, KINDS[kind](rng, _BASES[gates])


# =============================================================================== running cases


class CaseTimeout(BaseException):
    pass


def _alarm(*_):
    raise CaseTimeout


def _readers():
    from ecosim.trace.io import check_trace, iter_request_chunks, read_trace

    return {
        "check_trace": check_trace,
        "read_trace": read_trace,
        "iter_request_chunks": lambda p: list(iter_request_chunks(p, 40)),
    }


def run_case(i: int, path: Path, readers) -> dict[str, Any]:
    """One case: lay it out, read it, compare with the reference. Returns what happened."""
    from ecosim.errors import EcoSimError

    kind, case = make_case(i)
    lay_out(case, path)
    reader = list(readers)[(i // len(KINDS)) % len(readers)]
    out: dict[str, Any] = {"i": i, "kind": kind, "what": case.what, "reader": reader}
    t0 = time.process_time()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        readers[reader](path)
        out["outcome"], out["message"] = "ok", ""
    except EcoSimError as e:
        out["outcome"], out["message"] = "refused", str(e)
    except CaseTimeout:
        out["outcome"], out["message"] = "crash", f"no answer after {HANG_S:g} s"
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        out["outcome"] = "crash"
        out["message"] = f"{type(e).__name__}: {str(e)[:300]} at {traceback.extract_tb(e.__traceback__)[-1].filename}:" \
                         f"{traceback.extract_tb(e.__traceback__)[-1].lineno}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out["seconds"] = time.process_time() - t0  # CPU seconds of this process
    # The reference decides whenever the mutation may have left the trace valid (a refusal of a
    # must-fail case needs no second opinion; that saves a third of the time).
    out["reference"] = "must fail" if case.must_fail and out["outcome"] == "refused" else reference(path)
    out["problem"] = judge(out, case, path)
    return out


def judge(out: dict[str, Any], case: Case, path: Path) -> str | None:
    msg, ref = out["message"], out["reference"]
    if out["outcome"] == "crash":
        return f"not a one-line EcoSimError: {msg}"
    if out["seconds"] > CASE_LIMIT_S:
        return f"took {out['seconds']:.1f} CPU s"
    if out["outcome"] == "ok":
        if ref is not None:
            return f"accepted, but it breaks the format ({ref})"
        if case.must_fail:
            return "accepted, but the mutation must break it"
        return None
    if "memory budget allows" in msg:  # iter_request_chunks' budget (checked first), not a verdict
        return None if "\n" not in msg else f"not one line: {msg[:300]!r}"
    if ref is None:
        if case.raw and case.damaged and f"{case.damaged}: not a readable Parquet file" in msg:
            return None
        return f"refused a valid trace: {msg}"
    if "\n" in msg or "\r" in msg or len(msg) > 1000:
        return f"not one short line: {msg[:300]!r}"
    if str(path) not in msg or not any(f in msg for f in FILES):
        return f"does not name the trace and the file: {msg}"
    if case.damaged and case.must_fail and case.damaged not in msg and case.damaged != MANIFEST:
        return f"does not name the damaged file {case.damaged}: {msg}"
    return None


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(first: int, step: int, count: int, workdir: Path, progress: Path) -> dict[str, Any]:
    """Cases first, first + step, ... (count of them); a summary for the test.

    The address space is capped, so a huge allocation is a MemoryError in the case that made it
    (reported as a failure), never the machine's OOM killer.
    """
    import resource

    cap = ADDRESS_SPACE_GB << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    readers = _readers()
    path = workdir / "trace"
    failures, outcomes, refused = [], Counter(), {}
    slowest = (0.0, -1)
    t0 = time.perf_counter()
    for j in range(count):
        i = first + j * step
        if j % 64 == 0:
            progress.write_text(str(i))
        r = run_case(i, path, readers)
        outcomes[f"{r['kind']}:{r['outcome']}"] += 1
        slowest = max(slowest, (r["seconds"], i))
        if r["problem"]:
            failures.append({k: r[k] for k in ("i", "kind", "what", "reader", "problem", "reference")})
        elif r["outcome"] == "refused":
            refused.setdefault(r["kind"], []).append(i)
    return {"cases": count, "failures": failures, "outcomes": dict(outcomes), "refused": refused,
            "slowest": slowest, "peak_rss_mb": _peak_rss_mb(), "seconds": time.perf_counter() - t0}


# =============================================================================== the tests


def _run_workers(tmp_path: Path, cases: int) -> list[dict[str, Any]]:
    procs = []
    for w in range(WORKERS):
        d = tmp_path / f"w{w}"
        d.mkdir()
        count = len(range(w, cases, WORKERS))
        cmd = [sys.executable, str(Path(__file__).resolve()), "worker", str(w), str(WORKERS), str(count), str(d)]
        procs.append((subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), d))
    results = []
    for proc, d in procs:
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"a fuzz worker hung; last case batch started at {(d / 'progress').read_text()}")
        assert proc.returncode == 0, f"worker died ({proc.returncode}); last batch at {(d / 'progress').read_text()}: {err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _ecosim_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ecosim.cli", "check", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


@pytest.mark.slow
def test_ten_thousand_malformed_traces(tmp_path):
    results = _run_workers(tmp_path, CASES)
    failures = [f for r in results for f in r["failures"]]
    outcomes: Counter = Counter()
    for r in results:
        outcomes.update(r["outcomes"])
    assert sum(r["cases"] for r in results) == CASES >= 10_000
    assert not failures, f"{len(failures)} cases failed, e.g.:\n" + "\n".join(json.dumps(f) for f in failures[:15])
    # Every kind was generated, and every kind that can be refused was (a mutation that never
    # breaks anything would be a hole in the fuzzer, not a pass).
    for kind in KINDS:
        assert outcomes[f"{kind}:refused"] + outcomes[f"{kind}:ok"] >= CASES // len(KINDS) - 1, kind
        if kind != "extra_and_reordered":
            assert outcomes[f"{kind}:refused"] > 0, kind
    assert outcomes["extra_and_reordered:refused"] == 0
    slowest = max(r["slowest"] for r in results)
    assert slowest[0] < CASE_LIMIT_S, f"case {slowest[1]} took {slowest[0]:.1f} CPU s"
    peak = max(r["peak_rss_mb"] for r in results)
    assert peak < PEAK_RSS_LIMIT_MB, f"a fuzz worker peaked at {peak:.0f} MB resident"
    refusals = sum(v for k, v in outcomes.items() if k.endswith(":refused"))
    print(f"{CASES} cases in {max(r['seconds'] for r in results):.0f} s ({WORKERS} workers): {refusals} refused, "
          f"{CASES - refusals} valid by the reference and accepted; slowest case {slowest[0] * 1e3:.0f} ms; "
          f"peak resident {peak:.0f} MB")

    # A sample through the real command: exit 2, one line on stderr, no traceback.
    refused: dict[str, list[int]] = {}
    for r in results:
        for kind, ids in r["refused"].items():
            refused.setdefault(kind, []).extend(ids)
    sample: list[int] = []
    rounds = 0
    while len(sample) < 50 and rounds < 50:
        for kind in sorted(refused):
            if rounds < len(refused[kind]) and len(sample) < 50:
                sample.append(sorted(refused[kind])[rounds])
        rounds += 1
    assert len(sample) == 50
    dirs = []
    for i in sample:
        d = tmp_path / "cli" / str(i)
        d.parent.mkdir(exist_ok=True)
        lay_out(make_case(i)[1], d)
        dirs.append(d)
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = list(pool.map(_ecosim_check, dirs))
    for i, d, r in zip(sample, dirs, runs):
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and r.stdout == "", (i, make_case(i)[0], r.returncode, r.stdout, r.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("ecosim: error: ") and "Traceback" not in r.stderr, (i, r.stderr)


def test_the_reference_agrees_on_the_base_traces_and_a_few_cases(tmp_path):
    """Quick (not slow): the base traces are valid for both readers; a few cases of each kind run."""
    from ecosim.trace.io import check_trace

    for gates in (False, True):
        d = tmp_path / f"base{gates}"
        lay_out(Case(Base(11, gates)), d)
        assert reference(d) is None
        check_trace(d)
    readers = _readers()
    for i in range(2 * len(KINDS)):
        r = run_case(i, tmp_path / "case", readers)
        assert r["problem"] is None, r


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    first, step, count, workdir = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    print(json.dumps(worker(first, step, count, workdir, workdir / "progress")))
