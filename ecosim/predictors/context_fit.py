"""Fitting the `context` predictor (context.py): cross-fitted token tables, Adam over minibatches,
the mixture's log-likelihood and its gradients by hand; numpy only, seeded.

Why cross-fitting and the parent refresh: see context.py's docstring.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from ecosim.errors import EcoSimError
from ecosim.predictors.base import Selection, Shape, chunk_rows, top_ids
from ecosim.predictors.context import COUNTS, DEPTHS, EPS, ContextPredictor, flat_ids, layer_of, table_shares
from ecosim.predictors.token import TokenTable


def fit_context(shape: Shape, data: Any, selection: Selection = Selection(), dim: int = 16, epochs: int = 3,
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
    model = ContextPredictor(shape, full, vocab, params, selection)
    adam = _Adam(model.p, lr, weight_decay, decay=("W", "emb_tok", "emb_par"))
    t0 = time.perf_counter()
    losses = []
    for epoch in range(epochs):
        if epoch > 0 and refresh:
            own = _predict_rows(model, data, tables, fold, table_row)
            deep = data.depth[rows] > 0
            parent_set[deep] = own[data.parent[rows[deep]]]
        order = rng.permutation(len(rows))
        total, seen = 0.0, 0
        for a in range(0, len(order), batch):
            b = order[a : a + batch]
            r = rows[b]
            shares, bucket = _shares_by_fold(tables, fold[r], table_row[r])
            loss, grads = _loss_grad(model, data.token[r], data.parent_token[r], data.depth[r], shares, bucket,
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

def _predict_rows(model: ContextPredictor, data: Any, tables: list[TokenTable], fold: np.ndarray, table_row: np.ndarray) -> np.ndarray:
    """Predicted sets of every training row, level by level, each row's table shares from its
    fold's table (so no row sees its own request's counts)."""
    L, E, k = model.shape.num_moe_layers, model.shape.num_experts, model.shape.top_k
    out = np.full((len(data), L, max(k, model.selection.width(E, k))), -1, dtype=np.int16)
    chunk = chunk_rows(L, E)
    for d in range(int(data.depth.max(initial=0)) + 1):
        level = np.flatnonzero(data.depth == d)
        for a in range(0, len(level), chunk):
            r = level[a : a + chunk]
            shares, bucket = _shares_by_fold(tables, fold[r], table_row[r])
            par = data.prev_experts[r] if d == 0 else out[data.parent[r]]
            x, _, _, db = model.inputs(data.token[r], data.parent_token[r], data.depth[r])
            sel = model.selection.apply(model.forward(x, db, shares, bucket, par, data.prev_experts[r])[0], k)
            out[r, :, : sel.shape[2]] = sel
    return out

def _loss_grad(model: ContextPredictor, token: np.ndarray, parent_token: np.ndarray, depth: np.ndarray, shares: np.ndarray,
               bucket: np.ndarray, par: np.ndarray, prev: np.ndarray,
               experts: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """Mean over (node, layer) of -sum over the true top-k of (1/k) log P, and its gradients."""
    n = len(token)
    L, E, k = model.shape.num_moe_layers, model.shape.num_experts, model.shape.top_k
    x, ti, pi_idx, db = model.inputs(token, parent_token, depth)
    mix, q, pi = model.forward(x, db, shares, bucket, par, prev)
    y = flat_ids(experts, E)  # true experts, distinct within each (node, layer)
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
    p = model.p
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
        "a": np.bincount(layer_of(par, db, L), weights=dzf[flat_ids(par, E)], minlength=DEPTHS * L).reshape(DEPTHS, L),
        "c": np.bincount(layer_of(prev, db, L), weights=dzf[flat_ids(prev, E)], minlength=DEPTHS * L).reshape(DEPTHS, L),
        "w": g_w.reshape(DEPTHS, COUNTS, L),
    }
    return loss, {key: v.astype(np.float32) for key, v in grads.items()}


def _shares_by_fold(tables: list[TokenTable], fold: np.ndarray, table_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Table shares and count buckets of rows whose tokens sit at `table_row` of their fold's table."""
    L, E = tables[0].prior.shape
    shares = np.empty((len(fold), L, E), dtype=np.float32)
    bucket = np.zeros(len(fold), dtype=np.int64)
    for f in np.unique(fold):
        s = fold == f
        shares[s], bucket[s] = table_shares(tables[f], table_row[s])
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
