"""`ar`: plain autoregressive decoding, the root alone; every speedup is quoted against it."""

from __future__ import annotations

import numpy as np

from ecosim.policies.base import Policy
from ecosim.tree import Trees


def select_ar(trees: Trees) -> np.ndarray:
    """Plain decoding: the root only."""
    return trees.depth == 0


POLICY = Policy("ar", "Plain decoding: verify the root alone (no draft).",
                select=lambda ctx, knobs: select_ar(ctx.trees), speculative=False, role="baseline")
