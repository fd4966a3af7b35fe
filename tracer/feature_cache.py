"""The target's features over the training corpus, computed once, so head training never runs the target.

An EAGLE-3 head learns from three things per position: the token, the target's low/mid/high
hidden states (its features) and the target's next-token distribution (its labels, for
distillation). The target is frozen, so all three are a fixed function of the training windows:
`build` runs the target once over `n` seeded windows of the token stream and keeps the outputs of
the feature layers and of the last decoder layer; `FeatureCache.batch` gives back exactly what a
live forward gives (`features` below), reading the labels as the target does, final norm then LM
head over the stored last-layer output, so nothing of size vocabulary is stored. On the ecosim-tiny
target a training step then costs the head alone, and the corpus is not read or tokenised again.

The file (torch.save, memory-mapped on load) is a scratch artefact: write it under a git-ignored
folder (`.tmp*/`), never commit it. Stored in float16 by default (1.2 kB per token for three 192-wide
features); `--cache-dtype float32` keeps it bit-equal to the live forward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tracer.routing import decoder_layers

FORMAT = "ecosim-eagle3-features/1"


def hidden_states(target, layers: list[int], x: torch.Tensor) -> torch.Tensor:
    """(B, T, len(layers), H): the outputs of the target's decoder `layers` for windows `x`."""
    outs: dict[int, torch.Tensor] = {}
    mods = decoder_layers(target)
    hooks = [mods[i].register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o[0] if isinstance(o, tuple) else o))
             for i in layers]
    try:
        with torch.no_grad():
            target.model(input_ids=x, use_cache=False)  # the body only: the logits come from the last layer
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([outs[i] for i in layers], 2)


def read_out(target, last: torch.Tensor) -> torch.Tensor:
    """The target's logits from its last decoder layer's output (final norm, then LM head)."""
    with torch.no_grad():
        return target.get_output_embeddings()(target.model.norm(last))


def features(target, layers: list[int], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target logits (B, T, V), concatenated outputs of `layers` (B, T, 3H)) for windows `x`: live."""
    with torch.no_grad():
        logits = target(input_ids=x, use_cache=False).logits
    h = hidden_states(target, layers, x)
    return logits, h.flatten(2)


def stored_layers(target, layers: list[int]) -> list[int]:
    """The feature layers, then the last decoder layer when it is not one of them."""
    last = len(decoder_layers(target)) - 1
    return list(layers) + ([] if last in layers else [last])


def build(target, layers: list[int], stream: torch.Tensor, n: int, seq_len: int, seed: int, path: Path,
          dtype: torch.dtype = torch.float16, batch: int = 8, extra: dict | None = None, log=None) -> Path:
    """Run the target over `n` disjoint windows of `seq_len` tokens of `stream` (chosen by `seed`) and save
    their tokens and the outputs of `stored_layers` to `path`, with `extra` (small tensors the trainer
    would otherwise re-read the corpus for)."""
    chunks = len(stream) // seq_len
    if n > chunks:
        raise ValueError(f"asked for {n} windows of {seq_len} tokens; the stream holds {chunks}")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randperm(chunks, generator=g)[:n].sort().values * seq_len
    tokens = torch.stack([stream[s:s + seq_len] for s in starts.tolist()])  # (n, T)
    keep = stored_layers(target, layers)
    H = int(target.get_input_embeddings().weight.shape[1])
    hidden = torch.empty(n, seq_len, len(keep), H, dtype=dtype)  # (n, T, layers, H)
    for i in range(0, n, batch):
        hidden[i:i + batch] = hidden_states(target, keep, tokens[i:i + batch]).to(dtype)
        if log and (i // batch) % 50 == 0:
            log(f"[cache] {i + len(tokens[i:i + batch])}/{n} windows")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "layers": list(layers), "stored": keep, "seed": seed, "seq_len": seq_len,
                "tokens": tokens, "hidden": hidden, "extra": extra or {}}, path)
    return path


class FeatureCache:
    """A saved cache: `batch(idx)` is (tokens, target logits, features) as `features` gives them live."""

    def __init__(self, path: Path, target, layers: list[int]):
        d: dict[str, Any] = torch.load(path, mmap=True, weights_only=True)
        if d.get("format") != FORMAT or d["layers"] != list(layers) or d["stored"] != stored_layers(target, layers):
            raise ValueError(f"{path}: a feature cache of other layers or another format; delete it to rebuild")
        self.tokens, self.hidden, self.target, self.extra = d["tokens"], d["hidden"], target, d["extra"]
        self.n_feat, self.last = len(layers), d["stored"].index(len(decoder_layers(target)) - 1)

    def __len__(self) -> int:
        return len(self.tokens)

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.hidden[idx].float()  # (B, T, stored, H)
        return self.tokens[idx], read_out(self.target, h[:, :, self.last]), h[:, :, :self.n_feat].flatten(2)
