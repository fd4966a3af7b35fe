"""Every invariant of the trace contract, checked in one pass with bounded memory.

`TraceChecker` is fed the manifest, the positions table and then the node rows in batches of any
size (a batch may end inside a tree); it holds back the unfinished tree and checks whole trees
vectorised. The first broken invariant raises `TraceError` naming the file, row and column.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim import gate
from ecosim.catalog.shape import group_limit_problem
from ecosim.errors import EcoSimError
from ecosim.gate import GateError
from ecosim.gate.trace import MANIFEST as MANIFEST_SPEC
from ecosim.trace.schema import (FORMAT, MANIFEST, NODES, POSITIONS, PROVENANCES, READABLE_VERSIONS, SAMPLED_RULES,
                                 SAMPLED_VERSION)


class TraceError(EcoSimError):
    """A trace that breaks the contract: one line naming where."""

    def __init__(self, file: str, message: str, row: int | None = None, column: str | None = None):
        where = file
        if row is not None:
            where += f" row {row}"
        if column is not None:
            where += f" column '{column}'"
        super().__init__(f"{where}: {message}")
        self.file, self.row, self.column, self.detail = file, row, column, message

    def __reduce__(self) -> tuple[Any, ...]:  # raised in a sweep worker, it must unpickle in the main process
        return (type(self), (self.file, self.detail, self.row, self.column))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_decoding(d: dict[str, Any], version: int) -> None:
    """greedy, or (version 3 on) a continuation sampled at temperature > 0 under a rule that replays exactly."""
    mode = d.get("mode")
    if mode == "greedy":
        if version >= SAMPLED_VERSION:
            raise TraceError(MANIFEST, f"version {version} is written for sampled traces only; a greedy trace is version "
                             f"{SAMPLED_VERSION - 1} (or 1)", column="version")
        return
    if mode != "sample":
        raise TraceError(MANIFEST, f"must be 'greedy' or 'sample', not {mode!r}", column="decoding.mode")
    if version < SAMPLED_VERSION:
        raise TraceError(MANIFEST, f"a sampled trace is version {SAMPLED_VERSION}; version {version} records greedy "
                         "decoding only", column="decoding.mode")
    if d.get("temperature") is None:  # its range is the declaration's (ecosim/gate/trace.py)
        raise TraceError(MANIFEST, "missing key; a sampled trace names its temperature in (0, 100]", column="decoding.temperature")
    if d.get("verify") not in SAMPLED_RULES:
        raise TraceError(MANIFEST, f"must be one of {', '.join(SAMPLED_RULES)}", column="decoding.verify")


def check_manifest(m: Any) -> None:
    """The manifest's keys, types and ranges (its declaration, ecosim/gate/trace.py) and internal consistency."""
    if not isinstance(m, dict):
        raise TraceError(MANIFEST, "must be a JSON object")
    if m.get("format") != FORMAT:
        raise TraceError(MANIFEST, f"'format' is {m.get('format')!r}, expected {FORMAT!r}", column="format")
    if not _is_int(m.get("version")) or m.get("version") not in READABLE_VERSIONS:
        raise TraceError(
            MANIFEST, f"trace format version {m.get('version')!r} is not supported (this ecosim reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))})",
            column="version",
        )
    try:
        # version 1 has no provenance: a key of that name is ignored there, as any unknown key is
        gate.check(MANIFEST_SPEC, m if m["version"] >= 2 else {k: v for k, v in m.items() if k != "provenance"}, MANIFEST)
    except GateError as e:
        raise TraceError(MANIFEST, e.detail.replace("is missing;", "missing key;"), column=e.field) from None
    if m["version"] >= 2:
        p = m.get("provenance")
        if not isinstance(p, dict) or p.get("kind") not in PROVENANCES or not isinstance(p.get("source", ""), str):
            raise TraceError(MANIFEST, f"must be an object with 'kind' one of {', '.join(PROVENANCES)} and a 'source' string",
                             column="provenance")
        if (p["kind"] == "real") == m["synthetic"]:
            raise TraceError(MANIFEST, f"provenance {p['kind']!r} contradicts synthetic={m['synthetic']}", column="provenance")
    model = m["model"]
    layers = model["moe_layers"]
    if any(b <= a for a, b in zip(layers, layers[1:])) or layers[0] < 0 or layers[-1] >= model["num_layers"]:
        raise TraceError(MANIFEST, f"must increase within [0, num_layers={model['num_layers']})", column="model.moe_layers")
    if not 1 <= model["top_k"] <= model["num_experts"]:
        raise TraceError(MANIFEST, "must be in [1, num_experts]", column="model.top_k")
    if model["dense_bytes"] == 0 and not m["synthetic"]:  # every real model reads attention, embeddings and LM head
        raise TraceError(MANIFEST, "is 0 in a recorded trace: a real model reads attention, embeddings and the LM head "
                         "every forward (0 only in hand-worked synthetic shapes)", column="model.dense_bytes")
    if len(layers) * model["top_k"] > 2**31 - 1:  # the width of the `experts` lists
        raise TraceError(MANIFEST, "len(moe_layers) x top_k must fit an int32", column="model.top_k")
    if "n_group" in model or "topk_group" in model:  # optional: a shape's own group limits (ModelShape.n_group)
        why = group_limit_problem(model.get("n_group"), model.get("topk_group"), model["num_experts"], model["top_k"])
        if why:
            raise TraceError(MANIFEST, why, column="model.n_group")
    _check_decoding(m["decoding"], m["version"])
    seen: set[int] = set()
    for i, r in enumerate(m["requests"]):
        col = f"requests[{i}]"
        if r["request_id"] in seen:
            raise TraceError(MANIFEST, f"request_id {r['request_id']} repeats", column=f"{col}.request_id")
        seen.add(r["request_id"])
        ids = r.get("prompt_ids")
        if ids is not None and not all(t < model["vocab_size"] for t in ids):
            raise TraceError(MANIFEST, "must be a list of token ids in [0, vocab_size)", column=f"{col}.prompt_ids")


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


class TraceChecker:
    """Checks positions against the manifest, then node batches against both."""

    def __init__(self, manifest: dict[str, Any], positions: dict[str, np.ndarray]):
        check_manifest(manifest)
        model = manifest["model"]
        self.num_experts = int(model["num_experts"])
        self.top_k = int(model["top_k"])
        self.n_layers = len(model["moe_layers"])
        self.width = self.n_layers * self.top_k
        self.vocab = int(model["vocab_size"])
        self._check_positions(manifest, positions)
        self.tree_req = positions["request_id"]
        self.tree_pos = positions["pos"]
        self.tree_n = positions["n_nodes"].astype(np.int64)
        self.next_tree = 0  # index of the first tree not yet checked
        self.next_row = 0  # global row index of the first buffered node row
        self.buffer: dict[str, np.ndarray] | None = None
        self.root_token = np.zeros(len(self.tree_n), dtype=np.int64)
        self.root_next = np.zeros(len(self.tree_n), dtype=np.int64)
        self.root_row = np.zeros(len(self.tree_n), dtype=np.int64)

    def _check_positions(self, manifest: dict[str, Any], p: dict[str, np.ndarray]) -> None:
        req, pos, ctx, n = p["request_id"], p["pos"], p["context_len"], p["n_nodes"]
        expected = [(r["request_id"], r["positions"], r.get("prompt_ids")) for r in manifest["requests"]]
        order = sorted(expected)
        total = sum(e[1] for e in order)
        if len(req) != total:
            raise TraceError(POSITIONS, f"has {len(req)} rows but the manifest's requests have {total} positions")
        want_req = np.repeat(np.array([e[0] for e in order], dtype=np.int64), [e[1] for e in order])
        bad = req != want_req
        if bad.any():
            i = _first(bad)
            raise TraceError(POSITIONS, f"request_id {req[i]}, expected {want_req[i]} (sorted by request_id, pos; counts from the manifest)", i, "request_id")
        starts = np.concatenate([[0], np.cumsum([e[1] for e in order])])[:-1]
        start_of_row = np.repeat(starts, [e[1] for e in order])
        want_pos = np.arange(len(req)) - start_of_row
        bad = pos != want_pos
        if bad.any():
            i = _first(bad)
            raise TraceError(POSITIONS, f"pos {pos[i]}, expected {want_pos[i]} (dense from 0 per request)", i, "pos")
        if (n < 1).any():
            i = _first(n < 1)
            raise TraceError(POSITIONS, f"n_nodes {n[i]} < 1 (every tree has its root)", i, "n_nodes")
        offset = ctx.astype(np.int64) - pos
        for (rid, count, prompt), s in zip(order, starts):
            if count == 0:
                continue
            seg = offset[s : s + count]
            want = len(prompt) if prompt is not None else int(seg[0])
            bad = (seg != want) | (seg < 0)
            if bad.any():
                i = s + _first(bad)
                raise TraceError(POSITIONS, f"context_len {ctx[i]}, expected prompt length {want} + pos {pos[i]}", i, "context_len")

    def feed(self, batch: dict[str, np.ndarray]) -> None:
        """Add node rows (in file order); whole trees among them are checked now."""
        if self.buffer is None:
            self.buffer = batch
        else:
            self.buffer = {k: np.concatenate([self.buffer[k], batch[k]]) for k in batch}
        have = len(self.buffer["node"])
        sizes = self.tree_n[self.next_tree :]
        ends = np.cumsum(sizes)
        complete = int(np.searchsorted(ends, have, side="right"))
        if complete == len(sizes) and have > (ends[-1] if len(ends) else 0):
            extra = int(ends[-1]) if len(ends) else 0
            raise TraceError(NODES, "more node rows than the trees of positions.parquet hold", self.next_row + extra)
        if complete:
            used = int(ends[complete - 1])
            self._check_trees({k: v[:used] for k, v in self.buffer.items()}, complete)
            self.buffer = {k: v[used:] for k, v in self.buffer.items()}
            self.next_tree += complete
            self.next_row += used

    def finish(self) -> None:
        """After the last batch: no tree left unfinished, and the continuation is continuous."""
        left = len(self.buffer["node"]) if self.buffer is not None else 0
        if self.next_tree < len(self.tree_n):
            t = self.next_tree
            raise TraceError(
                POSITIONS, f"n_nodes {self.tree_n[t]} but nodes.parquet ends after {left} rows of this tree "
                f"(request {self.tree_req[t]}, pos {self.tree_pos[t]})", t, "n_nodes",
            )
        same_req = self.tree_req[1:] == self.tree_req[:-1]
        broken = same_req & (self.root_token[1:] != self.root_next[:-1])
        if broken.any():
            t = _first(broken) + 1
            raise TraceError(
                NODES, f"root token {self.root_token[t]} at (request {self.tree_req[t]}, pos {self.tree_pos[t]}) "
                f"!= target_next {self.root_next[t - 1]} of the root at pos {self.tree_pos[t - 1]} (continuity)",
                int(self.root_row[t]), "token",
            )

    def _check_trees(self, b: dict[str, np.ndarray], count: int) -> None:
        first, rows0 = self.next_tree, self.next_row
        sizes = self.tree_n[first : first + count]
        n = len(b["node"])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        start = np.repeat(starts, sizes)
        row = lambda mask: rows0 + _first(mask)  # noqa: E731 - global row of the first offender

        for col, want in (("request_id", self.tree_req), ("pos", self.tree_pos)):
            bad = b[col] != np.repeat(want[first : first + count], sizes)
            if bad.any():
                i = _first(bad)
                t = first + int(np.searchsorted(starts, i, side="right")) - 1
                raise TraceError(
                    NODES, f"{col} {b[col][i]}: expected tree (request {self.tree_req[t]}, pos {self.tree_pos[t]}) with "
                    f"n_nodes {self.tree_n[t]} from positions.parquet (rows sorted by request_id, pos, node)", rows0 + i, col,
                )
        node = b["node"].astype(np.int64)
        local = np.arange(n) - start
        if (node != local).any():
            raise TraceError(NODES, "node ids must run 0..n_nodes-1 in order within each tree", row(node != local), "node")
        parent = b["parent"].astype(np.int64)
        depth = b["depth"].astype(np.int64)
        root = node == 0
        if (parent[root] != -1).any():
            raise TraceError(NODES, "the root's parent must be -1", row(root & (parent != -1)), "parent")
        if (depth[root] != 0).any():
            raise TraceError(NODES, "the root's depth must be 0", row(root & (depth != 0)), "depth")
        bad = ~root & ((parent < 0) | (parent >= node))
        if bad.any():
            i = _first(bad)
            raise TraceError(NODES, f"parent {parent[i]} of node {node[i]} must satisfy 0 <= parent < node", rows0 + i, "parent")
        parent_row = np.where(root, 0, start + parent)
        bad = ~root & (depth != depth[parent_row] + 1)
        if bad.any():
            raise TraceError(NODES, "depth must be depth(parent) + 1", row(bad), "depth")
        token, nxt = b["token"].astype(np.int64), b["target_next"].astype(np.int64)
        for col, v in (("token", token), ("target_next", nxt)):
            bad = (v < 0) | (v >= self.vocab)
            if bad.any():
                raise TraceError(NODES, f"token id {v[_first(bad)]} outside [0, vocab_size={self.vocab})", row(bad), col)
        child = np.flatnonzero(~root)
        if len(child) > 1:
            order = np.lexsort((token[child], parent_row[child]))
            c = child[order]
            dup = (parent_row[c[1:]] == parent_row[c[:-1]]) & (token[c[1:]] == token[c[:-1]])
            if dup.any():
                i = int(c[1:][_first(dup)])
                raise TraceError(NODES, f"siblings share token {token[i]} (at most one chain may be accepted)", rows0 + i, "token")
        dlp, tlp = b["draft_logprob"], b["target_logprob"]
        if (dlp[root] != 0).any():
            raise TraceError(NODES, "the root's draft_logprob must be 0", row(root & (dlp != 0)), "draft_logprob")
        bad = ~root & ~(np.isfinite(dlp) & (dlp <= 0))
        if bad.any():
            raise TraceError(NODES, f"draft_logprob {dlp[_first(bad)]} must be finite and <= 0", row(bad), "draft_logprob")
        bad = ~root & ~(np.isfinite(tlp) & (tlp <= 1e-4))
        if bad.any():
            raise TraceError(NODES, f"target_logprob {tlp[_first(bad)]} must be finite and <= 0", row(bad), "target_logprob")
        self._check_experts(b["experts"], rows0)
        if "gates" in b:
            bad = ~np.isfinite(b["gates"]).all(axis=1)
            if bad.any():
                raise TraceError(NODES, "gate weights must be finite", row(bad), "gates")
        self.root_token[first : first + count] = token[root]
        self.root_next[first : first + count] = nxt[root]
        self.root_row[first : first + count] = rows0 + np.flatnonzero(root)

    def _check_experts(self, experts: np.ndarray, rows0: int) -> None:
        if experts.ndim != 2 or experts.shape[1] != self.width:
            raise TraceError(NODES, f"expected {self.width} experts per node (moe_layers x top_k)", column="experts")
        bad = ((experts < 0) | (experts >= self.num_experts)).any(axis=1)
        if bad.any():
            i = _first(bad)
            raise TraceError(NODES, f"expert id outside [0, num_experts={self.num_experts}): {experts[i].tolist()[:16]}", rows0 + i, "experts")
        e = experts.reshape(len(experts), self.n_layers, self.top_k)
        dup = np.zeros(len(experts), dtype=bool)
        for a in range(self.top_k):
            for c in range(a + 1, self.top_k):
                dup |= (e[:, :, a] == e[:, :, c]).any(axis=1)
        if dup.any():
            i = _first(dup)
            layer = int(np.argmax([len(set(x)) < self.top_k for x in e[i].tolist()]))
            raise TraceError(NODES, f"expert ids repeat within MoE layer {layer}: {e[i, layer].tolist()}", rows0 + i, "experts")
