"""Lossless verification at temperature > 0: which drafted child a step accepts, and how often.

At T > 0 the target does not have one next token but a distribution p (its logits / T, after top-p/top-k); the
draft has its own distribution q. A verification rule is lossless when the token it emits at a node is
distributed exactly as p. Two rules are in use, and both reduce to greedy verification at T = 0:

- **Target-only** (SGLang's tree sampling, `tree_speculative_sampling_target_only`): draw y ~ p; continue into the
  child whose token is y if there is one, else emit y and stop. Lossless for *any* candidate set, and optimal for
  a fixed one: P(continue) = sum of p over the candidates, the most a lossless rule can accept. It is the rule
  that suits trees of the draft's top-k children (deterministic candidates, EAGLE-2/3 style).
- **Rejection sampling** (Leviathan et al.'s speculative sampling for a chain; SpecInfer's recursive rejection
  sampling, RRS, for several children): try the children c_1..c_m in order; accept c_i with probability
  a_i = min(1, r_i(c_i) / q_i(c_i)); after a rejection the residual becomes r_{i+1} = norm(max(r_i - q_i, 0)) and,
  for children drafted without replacement, q_{i+1} = q_i with c_i removed, renormalised; if every child is
  rejected, emit a token of the last residual. r_1 = p, q_1 = q. Lossless *over the draft's sampling*: the children
  must be samples of q (i.i.d. with replacement, or without), not a fixed top-k.

Why replay stays exact. A trace at T > 0 records one sampled continuation y_0, y_1, ... and the candidate tree at
each position. A lossless rule emits at every node a token distributed as p, so the output is the target's sample
whatever the policy: one recorded continuation serves every policy, as in greedy replay. The rule decides only
*how* the continuation's next token y was emitted: by accepting a candidate (the step goes on) or from the residual
(the step ends). Given y the step goes on with

    target-only:                 P(continue | y) = 1 if y is a selected child, else 0               (1)
    speculative sampling, chain: P(continue | y) = q(y) min(1, p(y)/q(y)) / p(y) = min(1, q(y)/p(y)) (2)

(1) is greedy replay's rule applied to a sampled continuation; (2) averages over the draft's sample, which needs
only the draft's and the target's probability of y at the node. The expected accepted length of a step along the
continuation is sum over d >= 1 of the product of the continue probabilities at the first d nodes (`expected_run`).

Distributions are dense arrays over a support (the vocabulary, or a recorded top-k plus one bucket for the rest
of the mass, which can never be a candidate).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EPS = 1e-12


def target_only_accept(p: np.ndarray, children: Sequence[int]) -> np.ndarray:
    """P(child i is the one continued into) under target-only verification: p of its token."""
    return np.asarray([p[c] for c in children], dtype=np.float64)


def rejection_accept(p: np.ndarray, q: np.ndarray, children: Sequence[int], replacement: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(P(child i is accepted), the residual a full rejection samples from) under recursive rejection sampling.

    P(child i accepted) = prod_{j<i} (1 - a_j) * a_i with a_i = min(1, r_i(c_i) / q_i(c_i)), r and q updated after
    each rejection as the module says."""
    r = np.asarray(p, dtype=np.float64).copy()
    qi = np.asarray(q, dtype=np.float64).copy()
    out = np.zeros(len(children))
    reach = 1.0  # P(every earlier child was rejected)
    for i, c in enumerate(children):
        qc = qi[c]
        a = min(1.0, r[c] / qc) if qc > EPS else float(r[c] > EPS)  # q gives it no mass: never drawn from q
        out[i] = reach * a
        reach *= 1.0 - a
        if reach <= EPS:
            break
        r = np.maximum(r - qi, 0.0)
        r = r / r.sum() if r.sum() > EPS else r
        if not replacement:
            qi[c] = 0.0
            s = qi.sum()
            qi = qi / s if s > EPS else qi
    return out, r


def continue_target_only(selected_children_tokens: Sequence[int], y: int) -> float:
    """Equation (1)."""
    return 1.0 if y in selected_children_tokens else 0.0


def continue_sampled_chain(p_y: float, q_y: float) -> float:
    """Equation (2): P(the step goes on | the emitted token is y) when the chain's draft token is a sample of q."""
    if p_y <= EPS:
        return 0.0
    return min(1.0, q_y / p_y)


def expected_run(cont: Sequence[float]) -> float:
    """Expected accepted tokens of a step whose path along the continuation continues at depth d with probability
    cont[d-1]: sum over d of prod_{j<=d} cont[j-1]."""
    total, run = 0.0, 1.0
    for c in cont:
        run *= c
        if run <= 0.0:
            break
        total += run
    return total


def output_distribution(p: np.ndarray, q: np.ndarray, children: Sequence[int], replacement: bool = False) -> np.ndarray:
    """The distribution of the token rejection sampling emits at a node given these drafted children (an accepted
    child, or a sample of the residual). Averaged over children drawn from q it is p: that is losslessness, and the
    tests check it by enumerating every draw."""
    acc, residual = rejection_accept(p, q, children, replacement)
    out = np.zeros(len(p))
    for i, c in enumerate(children):
        out[c] += acc[i]
    out += (1.0 - acc.sum()) * residual
    return out
