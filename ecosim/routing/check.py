"""A routing preset against real routing it was not fitted on: the targets a preset is held to.

The preset's knobs route the real sequences' own token streams (calibrate.simulate: the same
tokens, so token repetition is the corpus's) and the generated moments are compared with the real
ones on those sequences:

- window curve: the worst relative error of the distinct experts in n tokens over n = 2..64
  (target: within 10%),
- neighbour overlap: the absolute difference (target: within 0.05),
- token recall@k of the `token` predictor, fitted on half the sequences (target: within 0.05),
- the median layer's busiest expert over its fair share, shown, not held to a target.

This is how a preset fitted to one half of a real set is checked on the other half, and how a
preset that was scaled from another model (routing/scale.py) is checked against a real model of
its shape where one is at hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.routing.calibrate import FIT_LAYERS, WINDOWS, moments, simulate
from ecosim.routing.data import Routing
from ecosim.routing.generator import RoutingKnobs

TARGETS = {"window": 0.10, "overlap": 0.05, "recall": 0.05}
CHECK_SEQUENCES = 200


def check_preset(real: Routing, knobs: RoutingKnobs, *, layers: int = FIT_LAYERS, sequences: int = CHECK_SEQUENCES,
                 seed: int = 0) -> dict[str, Any]:
    """Generated against real moments on the same token streams (module docstring); `sequences` of the real
    set at most (a seeded pick of whole sequences), `layers` generated layers (the knobs are shared by all)."""
    if (real.token < 0).all():
        raise EcoSimError("checking a preset needs the real routing's tokens (this source has none)")
    if len(real.seq_len) < 2 or real.seq_len.max(initial=0) < max(WINDOWS):
        raise EcoSimError(f"checking a preset needs at least 2 sequences and one of {max(WINDOWS)} tokens or more")
    pick = np.sort(np.random.default_rng(seed).permutation(len(real.seq_len))[: min(sequences, len(real.seq_len))])
    sub = real.subset(pick)
    tokens = [sub.token[a : a + n] for a, n in zip(sub.seq_start, sub.seq_len)]
    gen = simulate(knobs, tokens, real.num_experts, real.top_k, layers, seed)
    m_real, m_gen = moments(sub), moments(gen)
    errs = [(n, abs(g - r) / r) for n, (g, r) in enumerate(zip(m_gen["window_curve"], m_real["window_curve"]), 2) if r == r and g == g]
    worst_n, worst = max(errs, key=lambda x: x[1])
    out = {
        "sequences": int(len(pick)), "tokens": sub.n_tokens, "generated_layers": layers,
        "real": {k: m_real[k] for k in ("neighbour_overlap", "token_recall", "max_over_fair_median")}
        | {"window_distinct": m_real["window_distinct"]},
        "generated": {k: m_gen[k] for k in ("neighbour_overlap", "token_recall", "max_over_fair_median")}
        | {"window_distinct": m_gen["window_distinct"]},
        "window_worst": {"n": worst_n, "rel_error": worst},
        "overlap_error": abs(m_gen["neighbour_overlap"] - m_real["neighbour_overlap"]),
        "recall_error": None if m_real["token_recall"] is None else abs(m_gen["token_recall"] - m_real["token_recall"]),
    }
    out["meets"] = {"window": worst <= TARGETS["window"], "overlap": out["overlap_error"] <= TARGETS["overlap"],
                    "recall": out["recall_error"] is not None and out["recall_error"] <= TARGETS["recall"]}
    return out
