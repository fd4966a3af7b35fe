"""Mutation kinds of the Parquet files: damaged bytes (truncations, bit flips, footer damage, garbage, spliced
files) and damaged tables (wrong column types, dropped, repeated and extra columns, nulls, out-of-range and
repeated experts, cycles and orphans in the trees, non-finite probabilities, broken tokens and positions). Each
`k_*` takes a seeded generator and a `Base` and returns a `Case`; tests/fuzz_kinds.py gathers them.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import tiny_trace
from fuzz_traces import (
    NODES, POS_TYPES, POSITIONS, VOCAB, Case, E, K, L, W, _child_row, _copy, _nodes_case, _pos_case, _tree_of,
    encode, node_cols, pos_cols,
)


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


def _footer_start(data: bytearray) -> int:
    """Offset of a Parquet file's Thrift footer (its length sits before the closing magic)."""
    return max(4, len(data) - 8 - int.from_bytes(data[-8:-4], "little"))


def k_footer(rng, base):
    """Damage in the Thrift footer: where row counts, offsets and sizes live."""
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    lo = _footer_start(data)
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(lo, len(data) - 8))
        data[i] = int(rng.choice([0xFF, 0x7F, 0x80, 0x00, rng.integers(0, 256)]))
    return Case(base, {name: bytes(data)}, name, False, "footer damaged", raw=True)


def k_varint(rng, base):
    """A varint in the footer made huge: counts and sizes of 2^60 must not be allocated."""
    name = _parquet_file(rng)
    data = bytearray(base.bytes[name])
    lo = _footer_start(data)
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
