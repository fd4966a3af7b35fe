"""Routing layouts that research repositories commit (no pickle, no torch), read for `import-routing`.

Each loader returns `(sequences, tokens, extras)`: per-sequence (len, layers, k) expert ids, per
sequence token ids (or indices into `extras["token_strings"]`), and what else the source says
(`gates`, `token_strings`, `labels`, `num_experts`, `note`). `importers.import_routing` turns that
into a `Routing` labelled real. Layouts (docs/ROUTING_FORMAT.md has the details and where each was
seen):

- `events`: NumPy files of atomic (token, layer) events, one row per generated token per MoE
  layer: `sequence_id`, `generated_token_index` (or `position`), `layer_index`,
  `requested_expert_ids` [events, k], optional `router_weights` [events, k] and `token_id`. One
  `.npz`, or a folder searched recursively for them (the per-sequence chunks of a decode capture);
  a `NAME.metadata.json` beside `NAME.npz` may give `num_experts`.
- `layer-csv`: CSV files with a header `Layer ID, Batch Number, Token, Activated Expert IDs`, one
  row per (layer, token) with the token as a string and the ids as a JSON list; rows of a
  (layer, batch) are in token order. One file, or a folder of them; each (file, batch) is one
  sequence. Tokens are strings, so they become indices into a string table.
- `steps-json`: one JSON file per request (or a folder of them): a list of forward steps, each an
  object from layer number to that step's tokens' top-k ids ([tokens][k]), `null` for a dense
  layer. The first steps are the prompt's prefill (several tokens each); the decode steps, one
  token each, are what is read (the prefill is dropped, as the other decode sets hold decode
  tokens only). There are no token ids.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.routing.readers import bad, int_array, load_json, load_npz

EVENT_KEYS = ("sequence_id", "layer_index", "requested_expert_ids")
POSITION_KEYS = ("generated_token_index", "position")
CSV_HEADER = ("Layer ID", "Batch Number", "Token", "Activated Expert IDs")


def _files(path: Path, suffix: str) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob(f"*{suffix}") if p.is_file())
    if not files:
        raise bad(path, f"no {suffix} file under this folder")
    return files


def is_events_npz(path: Path) -> bool:
    """Whether an `.npz` holds atomic routing events (read without loading the arrays)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return all(k in z.files for k in EVENT_KEYS)
    except (ValueError, OSError):
        return False


def _sidecar_experts(npz: Path) -> int | None:
    side = npz.with_name(npz.stem + ".metadata.json")
    if not side.is_file():
        return None
    try:
        n = json.loads(side.read_bytes()).get("num_experts")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return int(n) if isinstance(n, int) else None


def load_events(path: Path) -> tuple[list[np.ndarray], list[np.ndarray] | None, dict[str, Any]]:
    """Sequences from atomic (token, layer) routing events (module docstring)."""
    seqs: list[np.ndarray] = []
    toks: list[np.ndarray] = []
    gates: list[np.ndarray] = []
    labels: list[dict[str, Any]] = []
    experts_said: set[int] = set()
    layers_seen: np.ndarray | None = None
    for f in _files(path, ".npz"):
        z = load_npz(f)
        missing = [k for k in EVENT_KEYS if k not in z.files]
        pos_key = next((k for k in POSITION_KEYS if k in z.files), None)
        if missing or pos_key is None:
            raise bad(f, f"not a routing events file: missing {', '.join(missing + ([] if pos_key else ['generated_token_index']))}")
        sid = int_array(z["sequence_id"], f, "sequence_id", 1)
        pos = int_array(z[pos_key], f, pos_key, 1)
        layer = int_array(z["layer_index"], f, "layer_index", 1)
        ids = int_array(z["requested_expert_ids"], f, "requested_expert_ids [events, top_k]", 2)
        tok = int_array(z["token_id"], f, "token_id", 1) if "token_id" in z.files else None
        w = np.asarray(z["router_weights"], dtype=np.float32) if "router_weights" in z.files else None
        n = len(ids)
        if not (len(sid) == len(pos) == len(layer) == n) or (tok is not None and len(tok) != n) or (w is not None and w.shape != ids.shape):
            raise bad(f, "event arrays differ in length")
        said = _sidecar_experts(f)
        if said:
            experts_said.add(said)
        for s in np.unique(sid):
            rows = np.flatnonzero(sid == s)
            order = rows[np.lexsort((layer[rows], pos[rows]))]
            lay = np.unique(layer[order])
            if layers_seen is None:
                layers_seen = lay
            elif not np.array_equal(lay, layers_seen):
                raise bad(f, f"sequence {s}: layers {lay.tolist()} differ from the first sequence's {layers_seen.tolist()}")
            L = len(lay)
            if len(order) % L:
                raise bad(f, f"sequence {s}: {len(order)} events are not whole tokens of {L} layers")
            p = pos[order].reshape(-1, L)
            if not ((p == p[:, :1]).all() and np.array_equal(p[:, 0], np.arange(p[0, 0], p[0, 0] + len(p)))
                    and (layer[order].reshape(-1, L) == lay).all()):
                raise bad(f, f"sequence {s}: positions are not consecutive with every layer once per token")
            seqs.append(ids[order].reshape(len(p), L, -1))
            if tok is not None:
                t = tok[order].reshape(-1, L)
                if not (t == t[:, :1]).all():
                    raise bad(f, f"sequence {s}: one token carries different token ids on different layers")
                toks.append(t[:, 0])
            if w is not None:
                gates.append(w[order].reshape(len(p), L, -1))
            labels.append({"file": str(f.relative_to(path)) if path.is_dir() else f.name, "sequence_id": int(s),
                           "first_position": int(p[0, 0])})
    if len(experts_said) > 1:
        raise bad(path, f"metadata files disagree on num_experts: {sorted(experts_said)}")
    extras: dict[str, Any] = {"labels": labels, "gates": gates or None,
                              "num_experts": experts_said.pop() if experts_said else None}
    return seqs, toks or None, extras


def _csv_rows(f: Path) -> Iterator[tuple[int, int, str, list[int]]]:
    try:
        with f.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            head = next(reader, None)
            if head is None or tuple(h.strip() for h in head[:4]) != CSV_HEADER:
                raise bad(f, f"expected the header {', '.join(CSV_HEADER)}")
            for n, row in enumerate(reader, 2):
                if len(row) != 4:
                    raise bad(f, f"line {n}: {len(row)} fields, expected 4")
                try:
                    ids = json.loads(row[3])
                    yield int(row[0]), int(row[1]), row[2], [int(x) for x in ids]
                except (ValueError, TypeError):
                    raise bad(f, f"line {n}: layer, batch or expert ids unreadable") from None
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f, f"unreadable ({e})") from None


def load_layer_csv(path: Path) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, Any]]:
    """Sequences from per-(layer, token) CSV rows (module docstring)."""
    strings: dict[str, int] = {}
    seqs, toks, labels = [], [], []
    layers_seen: list[int] | None = None
    for f in _files(path, ".csv"):
        by: dict[tuple[int, int], list[tuple[str, list[int]]]] = {}
        for layer, batch, token, ids in _csv_rows(f):
            by.setdefault((batch, layer), []).append((token, ids))
        if not by:
            continue
        for batch in sorted({b for b, _ in by}):
            lays = sorted(lay for b, lay in by if b == batch)
            if layers_seen is None:
                layers_seen = lays
            elif lays != layers_seen:
                raise bad(f, f"batch {batch}: layers {lays} differ from the first file's {layers_seen}")
            cols = [by[(batch, lay)] for lay in lays]
            T = len(cols[0])
            if any(len(c) != T for c in cols):
                raise bad(f, f"batch {batch}: layers hold different numbers of tokens")
            words = [tok for tok, _ in cols[0]]
            if any([tok for tok, _ in c] != words for c in cols):
                raise bad(f, f"batch {batch}: layers list different tokens")
            k = {len(ids) for c in cols for _, ids in c}
            if len(k) != 1:
                raise bad(f, f"batch {batch}: rows have {sorted(k)} expert ids; expected one top-k")
            seqs.append(np.array([[ids for _, ids in c] for c in cols], dtype=np.int64).transpose(1, 0, 2))
            toks.append(np.array([strings.setdefault(w, len(strings)) for w in words], dtype=np.int64))
            labels.append({"file": str(f.relative_to(path)) if path.is_dir() else f.name, "batch": batch})
    if not seqs:
        raise bad(path, "no routing rows")
    extras = {"labels": labels, "token_strings": list(strings), "layer_ids": layers_seen,
              "note": "expert ids as listed by the source (not necessarily best first)"}
    return seqs, toks, extras


def load_steps_json(path: Path) -> tuple[list[np.ndarray], None, dict[str, Any]]:
    """Decode steps of per-request step lists (module docstring)."""
    seqs, labels = [], []
    moe: list[str] | None = None
    dropped = 0
    for f in _files(path, ".json"):
        steps = load_json(f)
        if not isinstance(steps, list) or not steps or not all(isinstance(x, dict) for x in steps):
            raise bad(f, "expected a list of steps, each an object from layer to [tokens][top_k] expert ids")
        lays = sorted((k for k, v in steps[0].items() if v is not None), key=lambda k: int(k) if k.isdigit() else k)
        if moe is None:
            moe = lays
        elif lays != moe:
            raise bad(f, f"MoE layers {lays} differ from the first file's {moe}")
        rows, started = [], False
        for i, st in enumerate(steps):
            if sorted(k for k, v in st.items() if v is not None) != sorted(moe):
                raise bad(f, f"step {i}: MoE layers differ from the first step's")
            a = np.stack([int_array(st[k], f, f"step {i} layer {k} [tokens, top_k]", 2) for k in moe], axis=1)
            if len(a) == 1:
                started = True
                rows.append(a[0])
            elif started:
                raise bad(f, f"step {i}: {len(a)} tokens after decode began (one per step expected)")
            else:
                dropped += len(a)
        if rows:
            seqs.append(np.stack(rows))
            labels.append({"file": str(f.relative_to(path)) if path.is_dir() else f.name})
    if not seqs:
        raise bad(path, "no decode step (one token per step) in any file")
    return seqs, None, {"labels": labels, "layer_ids": [int(k) if k.isdigit() else k for k in moe or []],
                        "note": f"decode steps only; {dropped} prefill tokens dropped"}
