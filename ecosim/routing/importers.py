"""Importers of real routing recorded by serving and training stacks (no pickle, no torch).

Each reads one documented layout into a `Routing` labelled real (docs/ROUTING_FORMAT.md):

- `npz`: a folder with `routing.npz` (`expert_ids` [tokens, layers, k], optional `expert_probs`,
  `token`, `seq_start`, `seq_len`) and `meta.json` (`model`, `experts`, optional `token_strings`,
  `sequences`): the layout of ../shared/data/gpt-oss-20b-routing.
- `vllm`: vLLM's `routed_experts` (`--enable-return-routed-experts`): one [gen_len, num_moe_layers,
  top_k] int array per completion, in a `.npy` (one sequence), a `.npz` (one sequence per array,
  in file order) or JSON (a list of such nested lists, or of objects with `routed_experts` and
  optional `token_ids`/`prompt_token_ids`).
- `sglang`: SGLang's expert distribution recorder in `per_token` mode. Its dump is a torch file
  (`torch.save` of {"records": [...], "last_physical_to_logical_map": ...}); ecosim never unpickles,
  so this reads the same structure as JSON: each record has `forward_pass_id`, `input_ids`,
  `positions`, `topk_ids_of_layer` [layers][tokens][k] (physical ids, -1 unused). Tokens are
  chained into sequences by position (a token at position p continues the one at p - 1): exact at
  batch 1, which is what the recorder is run with for this purpose.
- `megatron`: Megatron-Core's router trace (`--moe-routing-trace-path`): JSONL, one record per
  (step, block, layer): `step`, `stage`, `block`, `layer`, `rank`, `num_tokens`, `topk`,
  `top_indices` [num_tokens][topk]. MTP records (`mtp_idx`) are skipped; the decoder block of the
  first rank and first stage seen is read; each step's tokens follow the previous step's (one
  sequence per file); there are no token ids.
- `events`, `layer-csv`, `steps-json`: layouts research repositories commit (atomic (token, layer)
  event arrays; per-(layer, token) CSV rows; per-request lists of forward steps), read by
  routing/dumps.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.routing.data import Routing, from_lists, is_routing_dir, read_routing, starts
from ecosim.routing.dumps import is_events_npz, load_events, load_layer_csv, load_steps_json
from ecosim.routing.readers import bad as _bad, int_array as _int_array, load_json as _load_json, load_npz as _npz


def load_npz_folder(path: Path) -> Routing:
    z = _npz(path / "routing.npz")
    meta = _load_json(path / "meta.json")
    if not isinstance(meta, dict):
        raise _bad(path / "meta.json", "must be a JSON object")
    for key in ("expert_ids", "seq_start", "seq_len"):
        if key not in z.files:
            raise _bad(path / "routing.npz", f"missing array '{key}'")
    e = _int_array(z["expert_ids"], path / "routing.npz", "expert_ids", 3)
    lens = _int_array(z["seq_len"], path / "routing.npz", "seq_len", 1)
    if lens.sum() != len(e) or not np.array_equal(_int_array(z["seq_start"], path, "seq_start", 1), starts(lens)):
        raise _bad(path / "routing.npz", "seq_start/seq_len do not tile expert_ids")
    tok = z["token"].astype(np.int64) if "token" in z.files else np.full(len(e), -1, np.int64)
    gates = z["expert_probs"].astype(np.float32) if "expert_probs" in z.files else None
    num_experts = int(meta.get("experts", int(e.max(initial=0)) + 1))
    source: dict[str, Any] = {"format": "npz", "path": str(path)}
    readme = path / "README.md"
    if readme.is_file():
        source["readme"] = readme.read_text(errors="replace")[:4000]
    return Routing(e.astype(np.int16), tok, starts(lens), lens, num_experts, str(meta.get("model", "unknown")), "real",
                   source, gates, meta.get("token_strings"), meta.get("sequences"))


def _vllm_seqs(obj: Any, path: Path) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    if isinstance(obj, dict):
        obj = [obj]
    if not isinstance(obj, list) or not obj:
        raise _bad(path, "expected a non-empty list of routed_experts arrays (or objects holding 'routed_experts')")
    seqs, toks = [], []
    for i, item in enumerate(obj):
        ids = None
        if isinstance(item, dict):
            if "routed_experts" not in item:
                raise _bad(path, f"item {i} has no 'routed_experts'")
            ids = item.get("token_ids")
            item = item["routed_experts"]
        seqs.append(_int_array(item, path, f"item {i} routed_experts [tokens, layers, top_k]", 3))
        toks.append(None if ids is None else _int_array(ids, path, f"item {i} token_ids", 1))
    if any(t is not None and len(t) != len(s) for s, t in zip(seqs, toks)):
        raise _bad(path, "token_ids and routed_experts differ in length")
    tokens = None if all(t is None for t in toks) else [t if t is not None else np.full(len(s), -1) for s, t in zip(seqs, toks)]
    return seqs, tokens


def load_vllm(path: Path) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    if path.suffix == ".npy":
        try:
            a = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise _bad(path, f"not a .npy readable without pickle ({str(e).splitlines()[0][:120]})") from None
        return [_int_array(a, path, "routed_experts [tokens, layers, top_k]", 3)], None
    if path.suffix == ".npz":
        z = _npz(path)
        if not z.files:
            raise _bad(path, "holds no arrays")
        return [_int_array(z[k], path, f"array '{k}' [tokens, layers, top_k]", 3) for k in z.files], None
    return _vllm_seqs(_load_json(path), path)


def load_sglang(path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    if path.suffix == ".pt":
        raise _bad(path, "a torch dump; ecosim never unpickles: convert it to JSON first (docs/ROUTING_FORMAT.md)")
    d = _load_json(path)
    recs = d.get("records") if isinstance(d, dict) else None
    if not isinstance(recs, list) or not recs:
        raise _bad(path, "expected an object with a non-empty 'records' list (SGLang per_token dump)")
    m = d.get("last_physical_to_logical_map")
    phys2log = None if m is None else _int_array(m, path, "last_physical_to_logical_map", 2)
    rank0 = recs[0].get("rank", 0) if isinstance(recs[0], dict) else 0
    toks, pos, rows = [], [], []
    for i, r in enumerate(sorted((r for r in recs if isinstance(r, dict) and r.get("rank", 0) == rank0),
                                 key=lambda r: r.get("forward_pass_id", 0))):
        for key in ("input_ids", "positions", "topk_ids_of_layer"):
            if key not in r:
                raise _bad(path, f"record {i} has no '{key}'")
        t = _int_array(r["topk_ids_of_layer"], path, f"record {i} topk_ids_of_layer [layers, tokens, k]", 3)
        ids = _int_array(r["input_ids"], path, f"record {i} input_ids", 1)
        p = _int_array(r["positions"], path, f"record {i} positions", 1)
        if t.shape[1] != len(ids) or len(p) != len(ids):
            raise _bad(path, f"record {i}: input_ids, positions and topk_ids_of_layer disagree on the token count")
        toks.append(ids), pos.append(p), rows.append(t.transpose(1, 0, 2))
    e = np.concatenate(rows)
    if phys2log is not None:
        if phys2log.shape[0] != e.shape[1] or e.max(initial=-1) >= phys2log.shape[1]:
            raise _bad(path, "last_physical_to_logical_map does not match the layers or ids of the records")
        e = np.where(e >= 0, phys2log[np.arange(e.shape[1])[None, :, None], e.clip(0)], -1)
    k = int((e >= 0).sum(axis=2).max(initial=0))
    e = e[:, :, :k]
    keep = (e >= 0).all(axis=(1, 2))
    tok, p = np.concatenate(toks)[keep], np.concatenate(pos)[keep]
    e = e[keep]
    if not len(e):
        raise _bad(path, "no token has a complete top-k at every layer")
    cuts = np.flatnonzero(np.diff(p) != 1) + 1
    return np.split(e, cuts), np.split(tok, cuts)


def load_megatron(path: Path) -> list[np.ndarray]:
    steps: dict[int, dict[int, np.ndarray]] = {}
    first: tuple[Any, Any] | None = None
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise _bad(path, f"unreadable ({e})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            raise _bad(path, f"line {n} is not JSON") from None
        if not isinstance(r, dict) or not {"step", "layer", "top_indices"} <= r.keys():
            raise _bad(path, f"line {n} lacks step/layer/top_indices (Megatron-Core router trace record)")
        if "mtp_idx" in r or r.get("block", "decoder") != "decoder":
            continue
        who = (r.get("rank", 0), r.get("stage"))
        first = first or who
        if who != first:
            continue
        a = _int_array(r["top_indices"], path, f"line {n} top_indices [num_tokens, topk]", 2)
        if "num_tokens" in r and a.shape[0] != r["num_tokens"]:
            raise _bad(path, f"line {n}: num_tokens {r['num_tokens']} but {a.shape[0]} rows of top_indices")
        steps.setdefault(int(r["step"]), {})[int(r["layer"])] = a
    if not steps:
        raise _bad(path, "no decoder router records")
    layers = sorted(next(iter(steps.values())))
    out = []
    for s in sorted(steps):
        if sorted(steps[s]) != layers:
            raise _bad(path, f"step {s} has layers {sorted(steps[s])}, expected {layers}")
        out.append(np.stack([steps[s][layer] for layer in layers], axis=1))
    return [np.concatenate(out)]


def detect(path: Path) -> str:
    """The format of `path` from its layout and, for JSON, its top-level keys."""
    if path.is_dir():
        if is_routing_dir(path):
            return "ecosim"
        if (path / "routing.npz").is_file() and (path / "meta.json").is_file():
            return "npz"
        first = next((p for p in sorted(path.rglob("*")) if p.suffix in (".npz", ".csv") and p.is_file()), None)
        if first is not None and first.suffix == ".csv":
            return "layer-csv"
        if first is not None and is_events_npz(first):
            return "events"
        js = next((p for p in sorted(path.rglob("*.json")) if p.is_file()), None) if first is None else None
        if js is not None and detect(js) == "steps-json":
            return "steps-json"
        raise _bad(path, "a directory that is neither an ecosim routing set, a routing.npz + meta.json folder, "
                         "nor a folder of routing events (.npz), layer CSV files or per-request step lists (.json)")
    if not path.is_file():
        raise _bad(path, "no such file or directory")
    if path.suffix == ".npz" and is_events_npz(path):
        return "events"
    if path.suffix in (".npy", ".npz"):
        return "vllm"
    if path.suffix == ".csv":
        return "layer-csv"
    if path.suffix == ".pt":
        return "sglang"
    if path.suffix == ".jsonl":
        return "megatron"
    if path.suffix == ".json":
        head = path.read_bytes()[:4096].lstrip()
        if head.startswith(b"{") and b'"records"' in head:
            return "sglang"
        return "steps-json" if head.startswith(b"[") and head[1:].lstrip().startswith(b"{") and b'"routed_experts"' not in head else "vllm"
    raise _bad(path, f"unknown routing format (give --format {', '.join(FORMATS)})")


FORMATS: dict[str, Callable[[Path], Any]] = {
    "npz": load_npz_folder, "vllm": load_vllm, "sglang": load_sglang, "megatron": load_megatron,
    "events": load_events, "layer-csv": load_layer_csv, "steps-json": load_steps_json,
}


def import_routing(path: str | Path, fmt: str | None = None, *, model: str | None = None,
                   num_experts: int | None = None, credit: str | None = None) -> Routing:
    """Read any supported source into a Routing labelled real, with its source."""
    path = Path(path)
    fmt = fmt or detect(path)
    if fmt == "ecosim":
        return read_routing(path)
    if fmt not in FORMATS:
        raise EcoSimError(f"unknown routing format {fmt!r}; known: {', '.join(FORMATS)}")
    if not path.exists():
        raise _bad(path, "no such file or directory")
    got = FORMATS[fmt](path)
    if isinstance(got, Routing):
        r = got
    else:
        seqs, tokens, extras = (got + ({},))[:3] if isinstance(got, tuple) else (got, None, {})
        shapes = {s.shape[1:] for s in seqs}
        if len(shapes) != 1:
            raise _bad(path, f"sequences disagree on (layers, top_k): {sorted(shapes)}")
        top = max(int(s.max(initial=-1)) for s in seqs)
        if min(int(s.min(initial=0)) for s in seqs) < 0:
            raise _bad(path, "negative expert ids")
        said = extras.get("num_experts")
        if num_experts is not None and said is not None and num_experts != said:
            raise _bad(path, f"the source says {said} experts, --num-experts {num_experts}")
        num_experts = num_experts if num_experts is not None else said
        inferred = num_experts is None
        E = num_experts if num_experts is not None else top + 1
        if top >= E:
            raise _bad(path, f"expert id {top} is not below --num-experts {E}")
        if not 2 <= E <= 32767:  # a mixture has two experts or more; the trace format holds ids up to 32,766
            raise _bad(path, f"{E} experts per layer{' (largest id + 1)' if inferred else ''}; allowed: [2, 32767]")
        source = {"format": fmt, "path": str(path), "num_experts_inferred": inferred}
        source.update({k: extras[k] for k in ("layer_ids", "note") if extras.get(k) is not None})
        r = from_lists(seqs, E, tokens=tokens, gates=extras.get("gates"), model=model or "unknown", provenance="real",
                       source=source, token_strings=extras.get("token_strings"), sequences=extras.get("labels"))
    if credit:
        r.source["credit"] = credit
    if model:
        r.model = model
    return r
