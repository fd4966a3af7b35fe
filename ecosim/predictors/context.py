"""`context`: a small learned model on cheap draft-side features, trained with numpy.

A mixture, per MoE layer l, of the `token` model and a learned log-linear model:

    P(e | x) = pi(x) * s_tok(x)[l, e] + (1 - pi(x)) * q(x)[l, e]

    s_tok    the `token` table's smoothed expert shares for x's token (token.py)
    q        softmax over experts of
               b[l, e]                          layer prior (initialised to log freq)
             + (h(x) @ W[l])[e]                 h = [emb(token), emb(parent token), onehot(depth)]
             + a[depth, l] * parent_set(x)[l, e]   the parent's predicted experts (a root's: the
                                                   previous position's true experts)
             + c[depth, l] * prev_set(x)[l, e]     the previous position's true experts
    pi       sigmoid(w[depth, count bucket of x's token, l]): how much to trust the table, by how
             often the token was seen (0 = unseen, 1, 2, 3-4, ..., 33+) and by depth

Why a mixture and not one log-linear model with the table as a feature: routing mixes sources
additively (a slot follows the token, or the context, or the layer's popularity), and a
log-linear fit of an additive mixture trades the table's ranking against the prior: on the
synthetic traces it ranked worse than the table alone. The mixture contains the `token` model
(pi = 1) and learns where the context adds to it.

Fitted by the mixture's log-likelihood of the true top-k (each true expert 1/k): Adam,
minibatches, seeded, numpy only. The token and parent-token embeddings (dim `dim`, tokens seen
at least twice) are learned here.

Stacking without leaking: a training row's s_tok comes from a table fitted on the *other* folds
of training requests (cross-fitting by request), because a row's twin (the same position in the
next tree, with identical routing) sits in the same request. The parent's set at training time is
that table's top-k for the parent token in the first epoch, then (`refresh`) this model's own
prediction of the parent, as at prediction time.

Cost per candidate: the table's shares (a few passes over layers x E), two embedding rows, a
(2*dim + DEPTHS) x (layers*E) matvec, a softmax and the mixture over layers x E, and the top-k;
`ecosim predictor eval` measures it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.predictors.base import Candidates, ScoringPredictor, Selection, Shape
from ecosim.predictors.token import TokenTable

DEPTHS = 8  # depth buckets 0..7 (7 = 7 and deeper)
COUNTS = 8  # token-count buckets: 0 (unseen), 1, 2, 3-4, 5-8, 9-16, 17-32, 33+
EPS = 1e-6
PARAMS = ("bias", "W", "emb_tok", "emb_par", "a", "c", "w")


def count_bucket(n: np.ndarray) -> np.ndarray:
    n = np.asarray(n, dtype=np.int64)
    return np.minimum(COUNTS - 1, np.where(n > 0, np.floor(np.log2(np.maximum(n, 1))).astype(np.int64) + 1, 0))


def table_shares(table: TokenTable, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, L, E) shares of table rows `idx` (-1: unseen, the prior) and their count buckets."""
    n = np.where(idx >= 0, table.n[np.maximum(idx, 0)] if len(table.tokens) else 0, 0)
    return table.scores_of(idx), count_bucket(n)


def flat_ids(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """(n, L, m) ids (-1 pads) -> flat indices of the valid ones into an (n, L, E) array."""
    n, L, _ = ids.shape
    base = (np.arange(n)[:, None, None] * L + np.arange(L)[None, :, None]) * num_experts
    return (base + ids.astype(np.int64))[ids >= 0]


def layer_of(ids: np.ndarray, db: np.ndarray, layers: int) -> np.ndarray:
    """For the valid entries of (n, L, m) ids: index depth * layers + layer (into a[depth, l])."""
    return np.broadcast_to(db[:, None, None] * layers + np.arange(layers)[None, :, None], ids.shape)[ids >= 0]


class ContextPredictor(ScoringPredictor):
    """The `token` table mixed with a learned model of the parent, the previous position and depth."""

    kind = "context"

    def __init__(self, shape: Shape, table: TokenTable, vocab: np.ndarray, params: dict[str, np.ndarray],
                 selection: Selection = Selection(), info: dict[str, Any] | None = None):
        self.shape = shape
        self.table = table
        self.vocab = np.asarray(vocab, dtype=np.int64)  # embedded tokens, sorted; index i -> row i + 1 (0: unknown)
        self.p = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
        self.selection = selection
        self.info = info or {}
        self.name = "context"

    # ---------------------------------------------------------------------------- the model

    def vocab_index(self, token: np.ndarray) -> np.ndarray:
        if len(self.vocab) == 0:
            return np.zeros(len(token), dtype=np.int64)
        i = np.minimum(np.searchsorted(self.vocab, token), len(self.vocab) - 1)
        return np.where(self.vocab[i] == token, i + 1, 0)

    def inputs(self, token: np.ndarray, parent_token: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, ...]:
        ti, pi = self.vocab_index(token), self.vocab_index(parent_token)
        db = np.minimum(depth, DEPTHS - 1).astype(np.int64)
        x = np.concatenate([self.p["emb_tok"][ti], self.p["emb_par"][pi], np.eye(DEPTHS, dtype=np.float32)[db]], axis=1)
        return x, ti, pi, db

    def forward(self, x: np.ndarray, db: np.ndarray, shares: np.ndarray, bucket: np.ndarray, par: np.ndarray,
                 prev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mixture P (n, L, E), the learned part q (n, L, E) and the table's weight pi (n, L)."""
        n = len(x)
        L, E = self.shape.num_moe_layers, self.shape.num_experts
        p = self.p
        z = (x @ p["W"].reshape(p["W"].shape[0], L * E)).reshape(n, L, E)
        z += p["bias"]
        zf = z.reshape(-1)
        np.add.at(zf, flat_ids(par, E), p["a"].reshape(-1)[layer_of(par, db, L)])
        np.add.at(zf, flat_ids(prev, E), p["c"].reshape(-1)[layer_of(prev, db, L)])
        z -= z.max(axis=-1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=-1, keepdims=True)
        q = z
        pi = 1.0 / (1.0 + np.exp(-p["w"][db, bucket]))  # (n, L)
        mix = q * (1.0 - pi)[..., None]
        mix += shares * pi[..., None]
        return mix, q, pi

    def scores(self, cands: Candidates) -> np.ndarray:
        x, _, _, db = self.inputs(cands.token, cands.parent_token, cands.depth)
        shares, bucket = table_shares(self.table, self.table.lookup(cands.token))
        return self.forward(x, db, shares, bucket, cands.parent_experts, cands.prev_experts)[0]

    # ---------------------------------------------------------------------------- storage

    def arrays(self) -> dict[str, np.ndarray]:
        t = self.table
        return {"tokens": t.tokens, "n": t.n, "ids": t.ids, "counts": t.counts.astype(np.uint32), "prior": t.prior,
                "vocab": self.vocab, **{f"param_{k}": v for k, v in self.p.items()}}

    def config(self) -> dict[str, Any]:
        return {"alpha": self.table.alpha, "width": int(self.table.ids.shape[-1]), "depths": DEPTHS,
                "count_buckets": COUNTS, **self.info}

    @classmethod
    def from_arrays(cls, shape: Shape, selection: Selection, arrays: dict[str, np.ndarray], config: dict[str, Any]) -> ContextPredictor:
        if (int(config.get("depths", -1)), int(config.get("count_buckets", -1))) != (DEPTHS, COUNTS):
            raise EcoSimError(f"context predictor with {config.get('depths')} depth and {config.get('count_buckets')} "
                              f"count buckets; this version uses {DEPTHS} and {COUNTS}: retrain it")
        table = TokenTable(arrays["tokens"].astype(np.int64), arrays["n"].astype(np.float32), arrays["ids"].astype(np.int16),
                           arrays["counts"].astype(np.float32), arrays["prior"].astype(np.float32), float(config["alpha"]),
                           shape.top_k)
        params = {k: arrays[f"param_{k}"] for k in PARAMS}
        info = {k: v for k, v in config.items() if k not in ("alpha", "width", "depths", "count_buckets")}
        return cls(shape, table, arrays["vocab"], params, selection, info)
