"""Routing sequences: the experts each token of a generated sequence was routed to, per MoE layer.

One in-memory type (`Routing`) for every source: a real recording imported with
`ecosim import-routing`, the continuation of a trace (its roots, in position order), or a
sequence drawn by the generator. Stored as a directory (docs/ROUTING_FORMAT.md):

- `routing.json`: format, version, model shape (name, layers, experts, top-k), provenance
  (`real`, `hybrid`, `synthetic`), source (what it was imported from, licence and credit),
  sequences and tokens, optional `token_strings`;
- `routing.parquet`: one row per token: `seq` int32, `pos` int32, `token` int32 (-1 = unknown),
  `experts` fixed-size list<int16>[layers * top_k] (each layer's top-k, best first), optional
  `gates` fixed-size list<float32> of the same width.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError
from ecosim.trace.io import Trace, provenance_of

FORMAT = "ecosim-routing"
VERSION = 1
META = "routing.json"
TABLE = "routing.parquet"
PROVENANCES = ("real", "hybrid", "synthetic")


@dataclass
class Routing:
    """Routing of `S` sequences, `N` tokens in all: `experts` (N, layers, k) int16, `token` (N,)
    int64 (-1 where the source has no token), `seq_start`/`seq_len` (S,) int64."""

    experts: np.ndarray
    token: np.ndarray
    seq_start: np.ndarray
    seq_len: np.ndarray
    num_experts: int
    model: str = "unknown"
    provenance: str = "real"
    source: dict[str, Any] = field(default_factory=dict)
    gates: np.ndarray | None = None
    token_strings: list[str] | None = None
    sequences: list[dict[str, Any]] | None = None  # per-sequence labels (dataset, task, ...)

    def __post_init__(self) -> None:
        if self.experts.ndim != 3:
            raise EcoSimError(f"routing experts must be (tokens, layers, top_k), got shape {self.experts.shape}")
        if len(self.token) != len(self.experts):
            raise EcoSimError("routing: token and experts have different lengths")
        if int(self.seq_len.sum()) != len(self.experts):
            raise EcoSimError("routing: sequence lengths do not add up to the token count")
        if self.provenance not in PROVENANCES:
            raise EcoSimError(f"routing provenance must be one of {', '.join(PROVENANCES)}, got {self.provenance!r}")
        if not 1 <= self.num_experts <= 32767:  # the trace format's range (expert ids are int16)
            raise EcoSimError(f"routing: {self.num_experts} experts per layer; allowed: [1, 32767]")
        if len(self.experts) and (self.experts.min() < 0 or self.experts.max() >= self.num_experts):
            raise EcoSimError(f"routing: expert ids outside [0, {self.num_experts})")
        if self.top_k > 1 and len(self.experts):  # a token's k experts in a layer are k different ones
            s = np.sort(self.experts, axis=2)
            dup = (s[:, :, 1:] == s[:, :, :-1]).any(axis=2)
            if dup.any():
                t, layer = (int(x) for x in np.argwhere(dup)[0])
                raise EcoSimError(f"routing: token {t} layer {layer} repeats an expert among its top-{self.top_k}: "
                                  f"{self.experts[t, layer].tolist()} (a token's experts in a layer are distinct)")

    @property
    def layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    @property
    def n_tokens(self) -> int:
        return int(len(self.experts))

    def seq_id(self) -> np.ndarray:
        """(N,) index of each token's sequence."""
        return np.repeat(np.arange(len(self.seq_len)), self.seq_len)

    def subset(self, seqs: np.ndarray) -> Routing:
        """The routing of the sequences `seqs` (indices), in that order."""
        seqs = np.asarray(seqs, dtype=np.int64)
        rows = np.concatenate([np.arange(self.seq_start[s], self.seq_start[s] + self.seq_len[s]) for s in seqs]) if len(seqs) else np.zeros(0, np.int64)
        lens = self.seq_len[seqs]
        return Routing(
            self.experts[rows], self.token[rows], starts(lens),
            lens, self.num_experts, self.model, self.provenance, self.source,
            None if self.gates is None else self.gates[rows], self.token_strings,
            None if self.sequences is None else [self.sequences[int(s)] for s in seqs],
        )

    def split(self, fraction: float = 0.5, seed: int = 0) -> tuple[Routing, Routing]:
        """Two disjoint sets of whole sequences (a seeded shuffle): fit on one, check on the other."""
        order = np.random.default_rng(seed).permutation(len(self.seq_len))
        cut = int(round(fraction * len(order)))
        return self.subset(np.sort(order[:cut])), self.subset(np.sort(order[cut:]))

    def meta(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "model": {"name": self.model, "num_moe_layers": self.layers,
                                                         "num_experts": self.num_experts, "top_k": self.top_k},
            "provenance": self.provenance, "source": self.source,
            "sequences": int(len(self.seq_len)), "tokens": self.n_tokens,
        }
        if self.sequences is not None:
            d["sequence_labels"] = self.sequences
        if self.token_strings is not None:
            d["token_strings"] = self.token_strings
        return d


def starts(lens: np.ndarray) -> np.ndarray:
    """First row of each sequence from the sequence lengths."""
    return (np.cumsum(lens) - lens).astype(np.int64)


def from_lists(seqs: list[np.ndarray], num_experts: int, *, tokens: list[np.ndarray] | None = None,
               gates: list[np.ndarray] | None = None, **kw: Any) -> Routing:
    """A Routing from per-sequence (len, layers, k) arrays."""
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    experts = np.concatenate(seqs).astype(np.int16) if seqs else np.zeros((0, 1, 1), np.int16)
    tok = np.concatenate(tokens).astype(np.int64) if tokens else np.full(len(experts), -1, np.int64)
    g = np.concatenate(gates).astype(np.float32) if gates else None
    start = starts(lens)
    return Routing(experts, tok, start, lens, num_experts, gates=g, **kw)


def trace_continuation(trace: Trace) -> Routing:
    """The target's own continuation of a trace (its roots, request by request, in position order)
    as a routing set, labelled with the trace's provenance."""
    m = trace.model
    roots = trace.tree_start[:-1]
    req = trace.positions["request_id"]
    order = np.lexsort((trace.positions["pos"], req))
    rows = roots[order]
    experts = trace.experts_3d()[rows]
    _, lens = np.unique(req[order], return_counts=True)
    gates = trace.nodes["gates"].reshape(-1, m.num_moe_layers, m.top_k)[rows] if "gates" in trace.nodes else None
    return Routing(
        experts.astype(np.int16), trace.nodes["token"][rows].astype(np.int64),
        starts(lens), lens.astype(np.int64), m.num_experts,
        m.name, provenance_of(trace.manifest), {"trace": str(trace.path)}, gates,
    )


# ------------------------------------------------------------------------------------- storage


def is_routing_dir(path: Path) -> bool:
    return (path / META).is_file() and (path / TABLE).is_file()


def write_routing(path: str | Path, r: Routing) -> Path:
    """Write a routing directory; refuses to replace anything that exists (written via a temporary)."""
    dest = Path(path)
    if dest.exists():
        raise EcoSimError(f"{dest}: exists; refusing to overwrite it (choose a new --out)")
    width = r.layers * r.top_k
    seq = np.repeat(np.arange(len(r.seq_len), dtype=np.int32), r.seq_len)
    pos = (np.arange(r.n_tokens) - np.repeat(r.seq_start, r.seq_len)).astype(np.int32)
    cols = {
        "seq": pa.array(seq), "pos": pa.array(pos), "token": pa.array(r.token.astype(np.int32)),
        "experts": pa.FixedSizeListArray.from_arrays(pa.array(r.experts.astype(np.int16).reshape(-1)), width),
    }
    if r.gates is not None:
        cols["gates"] = pa.FixedSizeListArray.from_arrays(pa.array(r.gates.astype(np.float32).reshape(-1)), width)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        pq.write_table(pa.table(cols), tmp / TABLE, compression="zstd", row_group_size=65536)
        (tmp / META).write_text(json.dumps(r.meta(), indent=1) + "\n")
        tmp.rename(dest)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EcoSimError(f"{dest}: could not write the routing ({e.strerror or e})") from None
    return dest


def read_routing(path: str | Path) -> Routing:
    """Read a routing directory written by `write_routing`, checking its layout."""
    path = Path(path)
    try:
        meta = json.loads((path / META).read_bytes())
        table = pq.read_table(path / TABLE)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise EcoSimError(f"{path}: not a readable routing directory ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise EcoSimError(f"{path}/{META}: not an {FORMAT} version {VERSION} file")
    m = meta["model"]
    L, k = int(m["num_moe_layers"]), int(m["top_k"])
    for col in ("seq", "pos", "token", "experts"):
        if col not in table.column_names:
            raise EcoSimError(f"{path}/{TABLE}: missing column '{col}'")
    seq = table["seq"].to_numpy()
    if len(seq) and np.any(np.diff(seq) < 0):
        raise EcoSimError(f"{path}/{TABLE}: rows are not grouped by 'seq'")
    experts = table["experts"].combine_chunks().values.to_numpy().reshape(-1, L, k).astype(np.int16)
    gates = None
    if "gates" in table.column_names:
        gates = table["gates"].combine_chunks().values.to_numpy().reshape(-1, L, k).astype(np.float32)
    _, lens = np.unique(seq, return_counts=True)
    lens = lens.astype(np.int64)
    return Routing(
        experts, table["token"].to_numpy().astype(np.int64), starts(lens),
        lens, int(m["num_experts"]), str(m.get("name", "unknown")), str(meta.get("provenance", "real")),
        dict(meta.get("source", {})), gates, meta.get("token_strings"), meta.get("sequence_labels"),
    )


def as_trace(r: Routing, model: ModelShape, path: Path | None = None) -> Trace:
    """A routing set as a trace a predictor can be scored on: each position p is a tree of its
    root (token p, experts p) and one candidate, the next token with its real experts (the same
    token in the same context as root p + 1). Requests are the sequences, so leave-requests-out
    fits on some answers and predicts others. Sequences shorter than 2 tokens are left out."""
    if (r.layers, r.top_k, r.num_experts) != (model.num_moe_layers, model.top_k, model.num_experts):
        raise EcoSimError(f"routing is {r.layers} layers x {r.num_experts} experts, top-{r.top_k}; "
                          f"{model.name} is {model.num_moe_layers} x {model.num_experts}, top-{model.top_k}")
    if (r.token < 0).any() or int(r.token.max(initial=0)) >= model.vocab_size:
        raise EcoSimError("predictor evaluation on routing needs token ids within the model's vocabulary")
    seqs = np.flatnonzero(r.seq_len >= 2)
    P = r.seq_len[seqs] - 1
    rows = np.concatenate([r.seq_start[s] + np.arange(p) for s, p in zip(seqs, P)])
    req = np.repeat(np.arange(len(seqs)), P).astype(np.int32)
    pos = np.concatenate([np.arange(p) for p in P]).astype(np.int32)
    T = len(rows)
    both = np.stack([rows, rows + 1], axis=1).reshape(-1)
    after = np.stack([rows + 1, np.minimum(rows + 2, r.n_tokens - 1)], axis=1).reshape(-1)
    nodes = {
        "request_id": np.repeat(req, 2), "pos": np.repeat(pos, 2), "node": np.tile([0, 1], T).astype(np.int16),
        "parent": np.tile([-1, 0], T).astype(np.int16), "depth": np.tile([0, 1], T).astype(np.int8),
        "token": r.token[both].astype(np.int32), "draft_logprob": np.tile([0.0, -0.1], T).astype(np.float32),
        "target_next": r.token[after].astype(np.int32), "target_logprob": np.tile([np.nan, -0.1], T).astype(np.float32),
        "experts": r.experts[both].reshape(2 * T, -1).astype(np.int16),
    }
    positions = {"request_id": req, "pos": pos, "context_len": (pos + 1).astype(np.int32), "n_nodes": np.full(T, 2, np.int16)}
    manifest = {
        "format": "ecosim-trace", "version": 2, "synthetic": r.provenance != "real",
        "provenance": {"kind": r.provenance, "source": str(r.source.get("credit") or r.source.get("path") or "")},
        "model": model.to_manifest(), "draft": {"name": "next-token", "params": 0, "bytes": 0},
        "tree": {"depth": 1, "topk": 1, "max_nodes": 1}, "decoding": {"mode": "greedy"},
        "requests": [{"request_id": i, "task": "routing", "positions": int(p)} for i, p in enumerate(P)],
        "recorded_on": {"routing": {k: v for k, v in r.source.items() if k != "readme"}},
    }
    return Trace(path or Path(r.model), manifest, positions, nodes)
