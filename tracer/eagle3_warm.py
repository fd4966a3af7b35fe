"""`--init DIR` of `tracer.train_eagle3`: start a head from a trained one, of the same shape or grown.

Why grow: a trained head's steps are the expensive part on one CPU thread, and its two capacity
limits are cheap to lift without losing them: a draft vocabulary that misses some of the target's
tokens (they can never be drafted, a hard cap on acceptance) and the MLP's width. The grown head
computes what the old one did (function-preserving, Net2Net-style: Chen et al. 2016,
https://arxiv.org/abs/1511.05641): the new MLP units start with a zero `down_proj` column, so
they add nothing until trained; the draft tokens the old head held keep its LM-head rows; the new
ones keep this run's initial rows (the target's own read-out rows with `--init-head`), so the old
tokens' logits are the old head's exactly and the new tokens' come from the target's read-out.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tracer.drafts.eagle3 import Eagle3Head, load_head
from tracer.errors import TracerError


def grow(old: Eagle3Head, head: Eagle3Head) -> None:
    """Copy `old` into the fresh `head` in place; `head` may have a wider MLP and a draft vocabulary
    that holds `old`'s. Raises TracerError (one line) for any other difference."""
    a, b = old.cfg.to_json(), head.cfg.to_json()
    same = {k: v for k, v in a.items() if k not in ("intermediate_size", "draft_vocab_size")}
    old_ids, new_ids = old.target_ids(), head.target_ids()
    where = {int(t): i for i, t in enumerate(new_ids.tolist())}
    if (same != {k: b[k] for k in same} or b["intermediate_size"] < a["intermediate_size"]
            or any(int(t) not in where for t in old_ids)):
        raise TracerError("--init: a head of another shape, layers or draft vocabulary than this run's (only a wider "
                          "--intermediate and a --draft-vocab that holds the old one's may differ)")
    src, dst = old.state_dict(), head.state_dict()
    n, rows = a["intermediate_size"], torch.tensor([where[int(t)] for t in old_ids], dtype=torch.long)
    with torch.no_grad():
        for k, v in src.items():
            if k in ("d2t", "t2d"):
                continue  # this run's vocabulary
            if k.endswith(("gate_proj.weight", "up_proj.weight")):
                dst[k][:n] = v
            elif k.endswith("down_proj.weight"):
                dst[k][:, :n], dst[k][:, n:] = v, 0.0
            elif k == "lm_head.weight":
                dst[k][rows] = v
            else:
                dst[k].copy_(v)


def warm_start(head: Eagle3Head, path: Path, target) -> None:
    """Load the head in `path` into `head` (a fresh one of this run's config, grown where it is wider):
    why: a longer or wider training continues from a committed head instead of paying again for the
    steps that made it."""
    tc = target.config
    old, _ = load_head(path, tc.num_hidden_layers, tc.hidden_size, tc.vocab_size)
    try:
        grow(old, head)
    except TracerError as e:
        raise TracerError(f"{path}: {e}") from None
