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

import sys
import time
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.predictors.base import Candidates, ScoringPredictor, Selection, Shape, chunk_rows, top_ids
from ecosim.predictors.token import TokenTable

DEPTHS = 8  # depth buckets 0..7 (7 = 7 and deeper)
COUNTS = 8  # token-count buckets: 0 (unseen), 1, 2, 3-4, 5-8, 9-16, 17-32, 33+
EPS = 1e-6
PARAMS = ("bias", "W", "emb_tok", "emb_par", "a", "c", "w")


def count_bucket(n: np.ndarray) -> np.ndarray:
    n = np.asarray(n, dtype=np.int64)
    return np.minimum(COUNTS - 1, np.where(n > 0, np.floor(np.log2(np.maximum(n, 1))).astype(np.int64) + 1, 0))


def _table_shares(table: TokenTable, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, L, E) shares of table rows `idx` (-1: unseen, the prior) and their count buckets."""
    n = np.where(idx >= 0, table.n[np.maximum(idx, 0)] if len(table.tokens) else 0, 0)
    return table.scores_of(idx), count_bucket(n)


def _flat(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """(n, L, m) ids (-1 pads) -> flat indices of the valid ones into an (n, L, E) array."""
    n, L, _ = ids.shape
    base = (np.arange(n)[:, None, None] * L + np.arange(L)[None, :, None]) * num_experts
    return (base + ids.astype(np.int64))[ids >= 0]


def _layer_of(ids: np.ndarray, db: np.ndarray, layers: int) -> np.ndarray:
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

    def _inputs(self, token: np.ndarray, parent_token: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, ...]:
        ti, pi = self.vocab_index(token), self.vocab_index(parent_token)
        db = np.minimum(depth, DEPTHS - 1).astype(np.int64)
        x = np.concatenate([self.p["emb_tok"][ti], self.p["emb_par"][pi], np.eye(DEPTHS, dtype=np.float32)[db]], axis=1)
        return x, ti, pi, db

    def _forward(self, x: np.ndarray, db: np.ndarray, shares: np.ndarray, bucket: np.ndarray, par: np.ndarray,
                 prev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mixture P (n, L, E), the learned part q (n, L, E) and the table's weight pi (n, L)."""
        n = len(x)
        L, E = self.shape.num_moe_layers, self.shape.num_experts
        p = self.p
        z = (x @ p["W"].reshape(p["W"].shape[0], L * E)).reshape(n, L, E)
        z += p["bias"]
        zf = z.reshape(-1)
        np.add.at(zf, _flat(par, E), p["a"].reshape(-1)[_layer_of(par, db, L)])
        np.add.at(zf, _flat(prev, E), p["c"].reshape(-1)[_layer_of(prev, db, L)])
        z -= z.max(axis=-1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=-1, keepdims=True)
        q = z
        pi = 1.0 / (1.0 + np.exp(-p["w"][db, bucket]))  # (n, L)
        mix = q * (1.0 - pi)[..., None]
        mix += shares * pi[..., None]
        return mix, q, pi

    def scores(self, cands: Candidates) -> np.ndarray:
        x, _, _, db = self._inputs(cands.token, cands.parent_token, cands.depth)
        shares, bucket = _table_shares(self.table, self.table.lookup(cands.token))
        return self._forward(x, db, shares, bucket, cands.parent_experts, cands.prev_experts)[0]

    # ---------------------------------------------------------------------------- training

    @classmethod
    def fit(cls, shape: Shape, data: Any, selection: Selection = Selection(), dim: int = 16, epochs: int = 3,
            batch: int = 512, lr: float = 0.03, weight_decay: float = 1e-4, folds: int = 4, alpha: float = 1.0,
            width: int | None = None, max_rows: int = 100_000, refresh: bool = True, seed: int = 0,
            verbose: bool = False, **_: Any) -> ContextPredictor:
        """Fit on `TrainingRows` (see train.py); rows of at least two requests are needed (cross-fitting)."""
        L, E, k = shape.num_moe_layers, shape.num_experts, shape.top_k
        width = width or 2 * k
        rng = np.random.default_rng(seed)
        units = np.unique(data.unit)
        if len(units) < 2:
            raise EcoSimError("the context predictor needs training rows from at least 2 requests (its token "
                              "feature is cross-fitted by request)")
        n_folds = min(folds, len(units))
        fold_of_unit = np.zeros(int(units.max()) + 1, dtype=np.int64)
        fold_of_unit[rng.permutation(units)] = np.arange(len(units)) % n_folds
        fold = fold_of_unit[data.unit]
        tables = [TokenTable.fit(data.token[fold != f], data.experts[fold != f], E, width, alpha) for f in range(n_folds)]
        full = TokenTable.fit(data.token, data.experts, E, width, alpha)
        table_row = np.zeros(len(data), dtype=np.int64)  # each row's token in its fold's table
        for f in range(n_folds):
            table_row[fold == f] = tables[f].lookup(data.token[fold == f])

        # Training rows (subsampled past max_rows); parents' sets start as the fold table's top-k.
        rows = np.arange(len(data))
        if len(rows) > max_rows:
            rows = np.sort(rng.choice(rows, max_rows, replace=False))
        m = max(k, selection.width(E, k))
        parent_set = np.full((len(rows), L, m), -1, dtype=np.int16)
        parent_set[:, :, :k] = data.prev_experts[rows]  # roots: previous position's true experts
        for f in range(n_folds):
            deep = rows[(fold[rows] == f) & (data.depth[rows] > 0)]
            uniq, inv = np.unique(data.parent_token[deep], return_inverse=True)
            picked = [top_ids(tables[f].scores_of(tables[f].lookup(uniq[a : a + 1024])), k) for a in range(0, len(uniq), 1024)]
            if picked:
                parent_set[np.searchsorted(rows, deep), :, :k] = np.concatenate(picked)[inv]

        vocab, counts = np.unique(data.token[rows], return_counts=True)
        vocab = vocab[counts >= 2]  # a token seen once gets no embedding of its own (it would only memorise)
        params = {
            "bias": np.log(full.prior.astype(np.float64) + EPS).astype(np.float32),
            "W": (rng.standard_normal((2 * dim + DEPTHS, L, E)) * 0.01).astype(np.float32),
            "emb_tok": (rng.standard_normal((len(vocab) + 1, dim)) * 0.1).astype(np.float32),
            "emb_par": (rng.standard_normal((len(vocab) + 1, dim)) * 0.1).astype(np.float32),
            "a": np.zeros((DEPTHS, L), dtype=np.float32),
            "c": np.zeros((DEPTHS, L), dtype=np.float32),
            "w": np.full((DEPTHS, COUNTS, L), 2.0, dtype=np.float32),  # start close to the table (pi = 0.88)
        }
        params["emb_tok"][0] = 0.0
        params["emb_par"][0] = 0.0
        model = cls(shape, full, vocab, params, selection)
        adam = _Adam(model.p, lr, weight_decay, decay=("W", "emb_tok", "emb_par"))
        t0 = time.perf_counter()
        losses = []
        for epoch in range(epochs):
            if epoch > 0 and refresh:
                own = model._predict_rows(data, tables, fold, table_row)
                deep = data.depth[rows] > 0
                parent_set[deep] = own[data.parent[rows[deep]]]
            order = rng.permutation(len(rows))
            total, seen = 0.0, 0
            for a in range(0, len(order), batch):
                b = order[a : a + batch]
                r = rows[b]
                shares, bucket = _shares_by_fold(tables, fold[r], table_row[r])
                loss, grads = model._loss_grad(data.token[r], data.parent_token[r], data.depth[r], shares, bucket,
                                               parent_set[b], data.prev_experts[r], data.experts[r])
                adam.step(grads)
                total += loss * len(b)
                seen += len(b)
            losses.append(total / max(seen, 1))
            if verbose:
                print(f"context: epoch {epoch + 1}/{epochs}, loss {losses[-1]:.4f}, {time.perf_counter() - t0:.1f} s",
                      file=sys.stderr)
        model.info = {"dim": dim, "epochs": epochs, "batch": batch, "lr": lr, "weight_decay": weight_decay,
                      "folds": n_folds, "refresh": refresh, "train_rows": int(len(rows)),
                      "embedded_tokens": int(len(vocab)), "loss_by_epoch": [round(x, 5) for x in losses]}
        return model

    def _predict_rows(self, data: Any, tables: list[TokenTable], fold: np.ndarray, table_row: np.ndarray) -> np.ndarray:
        """Predicted sets of every training row, level by level, each row's table shares from its
        fold's table (so no row sees its own request's counts)."""
        L, E, k = self.shape.num_moe_layers, self.shape.num_experts, self.shape.top_k
        out = np.full((len(data), L, max(k, self.selection.width(E, k))), -1, dtype=np.int16)
        chunk = chunk_rows(L, E)
        for d in range(int(data.depth.max(initial=0)) + 1):
            level = np.flatnonzero(data.depth == d)
            for a in range(0, len(level), chunk):
                r = level[a : a + chunk]
                shares, bucket = _shares_by_fold(tables, fold[r], table_row[r])
                par = data.prev_experts[r] if d == 0 else out[data.parent[r]]
                x, _, _, db = self._inputs(data.token[r], data.parent_token[r], data.depth[r])
                sel = self.selection.apply(self._forward(x, db, shares, bucket, par, data.prev_experts[r])[0], k)
                out[r, :, : sel.shape[2]] = sel
        return out

    def _loss_grad(self, token: np.ndarray, parent_token: np.ndarray, depth: np.ndarray, shares: np.ndarray,
                   bucket: np.ndarray, par: np.ndarray, prev: np.ndarray,
                   experts: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Mean over (node, layer) of -sum over the true top-k of (1/k) log P, and its gradients."""
        n = len(token)
        L, E, k = self.shape.num_moe_layers, self.shape.num_experts, self.shape.top_k
        x, ti, pi_idx, db = self._inputs(token, parent_token, depth)
        mix, q, pi = self._forward(x, db, shares, bucket, par, prev)
        y = _flat(experts, E)  # true experts, distinct within each (node, layer)
        row_layer = y // E
        p_true = mix.reshape(-1)[y] + 1e-12
        loss = -float(np.log(p_true).sum()) / (k * n * L)
        g_mix = -1.0 / (k * n * L) / p_true  # dloss/dP at the true experts (zero elsewhere)
        s_true, q_true = shares.reshape(-1)[y], q.reshape(-1)[y]
        pif = pi.reshape(-1)
        d_pi = np.bincount(row_layer, weights=g_mix * (s_true - q_true), minlength=n * L)
        d_w_in = (d_pi * pif * (1.0 - pif)).reshape(n, L)
        g_q = g_mix * (1.0 - pif[row_layer])  # dloss/dq at the true experts
        inner = np.bincount(row_layer, weights=g_q * q_true, minlength=n * L).reshape(n, L).astype(np.float32)
        dz = q * -inner[..., None]  # softmax backward: q * (g_q - <g_q, q>)
        np.add.at(dz.reshape(-1), y, (q_true * g_q).astype(np.float32))
        p = self.p
        F = x.shape[1]
        dz2 = dz.reshape(n, L * E)
        dx = dz2 @ p["W"].reshape(F, L * E).T
        d = p["emb_tok"].shape[1]
        g_tok = np.zeros_like(p["emb_tok"])
        g_par = np.zeros_like(p["emb_par"])
        np.add.at(g_tok, ti, dx[:, :d])
        np.add.at(g_par, pi_idx, dx[:, d : F - DEPTHS])
        g_tok[0] = 0.0  # the unknown token's row stays at zero
        g_par[0] = 0.0
        dzf = dz.reshape(-1)
        g_w = np.zeros((DEPTHS * COUNTS, L))
        np.add.at(g_w, db * COUNTS + bucket, d_w_in)
        grads = {
            "bias": dz.sum(axis=0),
            "W": (x.T @ dz2).reshape(F, L, E),
            "emb_tok": g_tok,
            "emb_par": g_par,
            "a": np.bincount(_layer_of(par, db, L), weights=dzf[_flat(par, E)], minlength=DEPTHS * L).reshape(DEPTHS, L),
            "c": np.bincount(_layer_of(prev, db, L), weights=dzf[_flat(prev, E)], minlength=DEPTHS * L).reshape(DEPTHS, L),
            "w": g_w.reshape(DEPTHS, COUNTS, L),
        }
        return loss, {key: v.astype(np.float32) for key, v in grads.items()}

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


def _shares_by_fold(tables: list[TokenTable], fold: np.ndarray, table_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Table shares and count buckets of rows whose tokens sit at `table_row` of their fold's table."""
    L, E = tables[0].prior.shape
    shares = np.empty((len(fold), L, E), dtype=np.float32)
    bucket = np.zeros(len(fold), dtype=np.int64)
    for f in np.unique(fold):
        s = fold == f
        shares[s], bucket[s] = _table_shares(tables[f], table_row[s])
    return shares, bucket


class _Adam:
    """Adam with decoupled weight decay on the named parameters, updating arrays in place."""

    def __init__(self, params: dict[str, np.ndarray], lr: float, weight_decay: float, decay: tuple[str, ...],
                 b1: float = 0.9, b2: float = 0.999):
        self.p, self.lr, self.wd, self.decay, self.b1, self.b2 = params, lr, weight_decay, decay, b1, b2
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            if k in self.decay:
                self.p[k] *= 1 - self.lr * self.wd
            self.p[k] -= self.lr * (m / c1) / (np.sqrt(v / c2) + 1e-8)
