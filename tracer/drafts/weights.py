"""Reading named tensors from a checkpoint's safetensors (one file or an index of shards).

A head draft needs a few tensors that transformers does not load (DeepSeek-V3's MTP layer
``model.layers.{N}.*``) or that live outside any transformers class (an EAGLE-3 head). They are
read here with `safetensors.safe_open`, by name, from safetensors only; a missing name stops the
recording with one line that names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tracer.errors import TracerError

INDEX = "model.safetensors.index.json"


def weight_map(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it, for the checkpoint directory `path`."""
    index = path / INDEX
    if index.is_file():
        wm = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        return {k: path / v for k, v in wm.items()}
    from safetensors import safe_open

    out: dict[str, Path] = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            out.update({k: f for k in sf.keys()})
    return out


def _short(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def read_tensors(path: Path, names: list[str], *, optional: list[str] = (), prefix_ok: list[str] = (),
                 what: str) -> dict[str, torch.Tensor]:
    """`names` (all required), `optional` (when present), and every tensor under a `prefix_ok` prefix."""
    from safetensors import safe_open

    if not any(path.glob("*.safetensors")):
        raise TracerError(f"{what}: no *.safetensors in {path}")
    wm = weight_map(path)
    missing = [n for n in names if n not in wm]
    if missing:
        raise TracerError(f"{what}: {path} lacks the tensors {_short(missing)}")
    want = list(names) + [n for n in optional if n in wm]
    want += sorted(k for k in wm if any(k.startswith(p) for p in prefix_ok) and k not in want)
    out: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for n in want:
        by_file.setdefault(wm[n], []).append(n)
    for f, ns in by_file.items():
        if not f.is_file():
            raise TracerError(f"{what}: {f.name} (holding {ns[0]}) is listed in {INDEX} but not there")
        with safe_open(str(f), framework="pt") as sf:
            for n in ns:
                out[n] = sf.get_tensor(n)
    return out
