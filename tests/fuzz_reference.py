"""The reference the reader fuzzer judges by: a plain, row-by-row restatement of TRACE_FORMAT.md (plus the
reader's documented sanity bounds). `reference(path)` says why a trace directory breaks the format, or None when
it is valid; tests/test_fuzz_readers.py requires the readers to refuse exactly the traces it finds invalid.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fuzz_traces import FILES, MANIFEST, NODE_TYPES, NODES, POS_TYPES, POSITIONS


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
