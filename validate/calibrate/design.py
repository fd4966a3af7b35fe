"""What to time: the verify cases of a calibration (forced routing, and the tree when traced).

Two designs (package docstring): a grid of tokens x expert unions dealt round-robin, or subtrees
of recorded trees with their recorded routing, grown by four rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ecosim.catalog.models import ModelShape
from validate.calibrate.config import CalibConfig


@dataclass
class Case:
    """One verify forward to time: the routing to force, (n, layers, k), and the tree (None: random)."""

    experts: np.ndarray
    parents: np.ndarray | None = None
    kind: str = "grid"

    @property
    def n(self) -> int:
        """Tokens verified."""
        return int(self.experts.shape[0])

    @property
    def union(self) -> list[int]:
        """Distinct experts per MoE layer: what the step reads."""
        return [int(len(np.unique(self.experts[:, j]))) for j in range(self.experts.shape[1])]


def deal(n: int, u: int, layers: int, k: int, num_experts: int, rng: np.random.Generator) -> np.ndarray:
    """(n, layers, k) expert ids: per layer a random set of u experts dealt round-robin over the
    n*k slots, so each token's k ids are distinct and the layer's union is exactly u."""
    if not k <= u <= min(num_experts, n * k):
        raise ValueError(f"union {u} impossible for {n} tokens of top-{k} over {num_experts} experts")
    out = np.empty((n, layers, k), dtype=np.int64)
    slot = np.arange(n * k).reshape(n, k) % u
    for layer in range(layers):
        chosen = rng.permutation(num_experts)[:u]
        out[:, layer, :] = chosen[slot]
    return out


def union_levels(n: int, k: int, num_experts: int, levels: int) -> list[int]:
    """Up to `levels` distinct unions spread evenly over the possible ones, [k, min(E, n k)]."""
    lo, hi = k, min(num_experts, n * k)
    return sorted({int(round(x)) for x in np.linspace(lo, hi, levels)})


def grid_design(cfg: CalibConfig, shape: ModelShape, rng: np.random.Generator) -> list[Case]:
    """Tokens x union levels, routing dealt round-robin (every expert of a layer gets n k / u tokens)."""
    k, E, layers = shape.top_k, shape.num_experts, shape.num_moe_layers
    return [Case(deal(n, u, layers, k, E, rng), None, f"grid u={u}") for n in cfg.tokens for u in union_levels(n, k, E, cfg.levels)]


STRATEGIES = ("confidence", "random", "min-union", "max-union")


def _grow(parents: np.ndarray, cum: np.ndarray, experts: np.ndarray, n: int, strategy: str,
          rng: np.random.Generator) -> np.ndarray:
    """Node ids (sorted) of an ancestor-closed subtree of n nodes, grown from the root."""
    if strategy == "confidence":
        rest = sorted(range(1, len(parents)), key=lambda v: (-cum[v], v))[: n - 1]
        return np.array(sorted([0, *rest]))
    layers = experts.shape[1]
    chosen = [0]
    have = [set(experts[0, j].tolist()) for j in range(layers)]
    frontier = [v for v in range(1, len(parents)) if parents[v] == 0]
    while len(chosen) < n and frontier:
        if strategy == "random":
            v = frontier[int(rng.integers(len(frontier)))]
        else:
            new = [sum(len(set(experts[f, j].tolist()) - have[j]) for j in range(layers)) for f in frontier]
            sign = 1 if strategy == "min-union" else -1
            v = min(zip(frontier, new), key=lambda fv: (sign * fv[1], -cum[fv[0]], fv[0]))[0]
        chosen.append(v)
        frontier.remove(v)
        frontier += [c for c in range(v + 1, len(parents)) if parents[c] == v]
        for j in range(layers):
            have[j] |= set(experts[v, j].tolist())
    return np.array(sorted(chosen))


def trace_design(trace: Any, cfg: CalibConfig, rng: np.random.Generator) -> list[Case]:
    """Subtrees of the recorded trees, their recorded routing forced: for each n in `tokens`, one
    subtree per strategy (confidence order, random growth, growth adding the fewest / the most new
    experts) of a random tree with at least n nodes; for n = 1, `levels` random roots. The tokens
    per expert then follow decoding's own distribution, which matters where a kernel's cost per
    expert depends on it (CPU GEMMs switch algorithm at a few rows)."""
    from ecosim.tree import Trees

    t = Trees(trace)
    ex = trace.experts_3d().astype(np.int64)
    par_all = trace.nodes["parent"].astype(np.int64)
    out: list[Case] = []
    for n in cfg.tokens:
        big = np.flatnonzero(t.n_nodes >= n)
        if len(big) == 0:
            continue
        for strategy in (("root",) * cfg.levels if n == 1 else STRATEGIES):
            tree = int(big[rng.integers(len(big))])
            a, b = int(t.start[tree]), int(t.start[tree] + t.n_nodes[tree])
            parents, cum, experts = par_all[a:b], t.cum_logprob[a:b], ex[a:b]
            ids = _grow(parents, cum, experts, n, strategy, rng) if n > 1 else np.array([0])
            new = np.full(b - a, -1)
            new[ids] = np.arange(len(ids))
            sub_par = np.where(parents[ids] >= 0, new[np.maximum(parents[ids], 0)], -1)
            out.append(Case(experts[ids], sub_par, f"trace {strategy}"))
    return out
