"""Mutation kinds of the manifest (values of every wrong type, versions, counts, shapes, prompts, huge request
lists, damaged JSON bytes), of files that are not files (absent, directories, FIFOs, /dev/zero, dangling links),
and several node mutations combined. Each `k_*` takes a seeded generator and a `Base` and returns a `Case`;
tests/fuzz_kinds.py gathers them, and tests/test_fuzz_commands.py reuses `ODD_VALUES`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from conftest import set_path
from fuzz_traces import FILES, MANIFEST, VOCAB, Case, E, K, _copy, _manifest_case, _nodes_case


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


def k_manifest_value(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    paths = _paths(m)
    path = paths[int(rng.integers(0, len(paths)))]
    value = KeyError if rng.random() < 0.15 else ODD_VALUES[int(rng.integers(0, len(ODD_VALUES)))]
    set_path(m, path, value)
    return _manifest_case(base, m, f"manifest {'.'.join(map(str, path))} = {str(value)[:20]}")


def k_manifest_version(rng, base):
    m = json.loads(base.bytes[MANIFEST])
    key = "version" if rng.random() < 0.7 else "format"
    value = [0, 4, -1, "1", 1.0, True, None, 10**20, [1], {"v": 1}, KeyError, "ecosim-trace-v2", "ECOSIM-TRACE"]
    v = value[int(rng.integers(0, len(value)))]
    set_path(m, (key,), v)
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
