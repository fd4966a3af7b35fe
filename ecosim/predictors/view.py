"""The draft side's view of a trace, per node row, and the bookkeeping of requests and traces.

Everything here is what a predictor may use at selection time (see base.py): tokens, depths, the
tree structure, and the true routing of *earlier positions* (already verified). A node's own
true experts are never read here except as the previous position's routing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from ecosim.predictors.candidates import Candidates
from ecosim.trace.io import Trace
from ecosim.tree import Trees


@dataclass(frozen=True)
class DraftView:
    """Per node row: token, parent token, depth, parent row (-1 for roots), the row whose true
    routing is the previous position's (-1 at pos 0), request id, tree and draft log-prob; rows
    by depth."""

    token: np.ndarray
    parent_token: np.ndarray
    depth: np.ndarray
    parent_row: np.ndarray
    prev_row: np.ndarray
    request: np.ndarray
    tree_of_row: np.ndarray
    draft_logprob: np.ndarray
    levels: list[np.ndarray]  # rows at depth 0, 1, 2, ...: parents sit in an earlier level

    @property
    def n_rows(self) -> int:
        return len(self.token)

    def whole_trees(self, only: np.ndarray | None) -> np.ndarray:
        """A row mask widened to whole candidate trees (all rows when `only` is None)."""
        if only is None:
            return np.ones(self.n_rows, dtype=bool)
        trees = np.zeros(int(self.tree_of_row.max(initial=-1)) + 1, dtype=bool)
        trees[self.tree_of_row[only]] = True
        return trees[self.tree_of_row]

    def candidates(self, rows: np.ndarray, true: np.ndarray, predicted: np.ndarray) -> Candidates:
        """The `Candidates` of `rows`: parents' sets come from `predicted` (roots: the previous
        position's true experts from `true`), so parents must be predicted first."""
        prev = self.prev_row[rows]
        par = self.parent_row[rows]

        def prev_experts() -> np.ndarray:
            return np.where((prev >= 0)[:, None, None], true[np.maximum(prev, 0)], np.int16(-1))

        def parent_experts() -> np.ndarray:
            root = par < 0
            if root.all():
                return prev_experts()
            m = max(predicted.shape[2], true.shape[2])
            out = np.full((len(rows), predicted.shape[1], m), -1, dtype=np.int16)
            out[~root, :, : predicted.shape[2]] = predicted[par[~root]]
            if root.any():
                out[root, :, : true.shape[2]] = prev_experts()[root]
            return out

        return Candidates(self.token[rows], self.parent_token[rows], self.depth[rows], parent_experts, prev_experts,
                          self.draft_logprob[rows])


def draft_view(trace: Trace) -> DraftView:
    """The draft side's view of every node row (cached on the trace)."""
    return trace.derived("draft view", lambda: _draft_view(trace))


def _draft_view(trace: Trace) -> DraftView:
    t = Trees(trace)
    token = trace.nodes["token"].astype(np.int64)
    depth = t.depth
    own = np.arange(t.n_rows)
    parent_row = np.where(depth > 0, t.parent_row, -1)
    pos = trace.positions["pos"].astype(np.int64)
    req_of_tree = trace.positions["request_id"].astype(np.int64)
    prev_tree = np.where(pos > 0, np.arange(t.n_trees) - 1, -1)
    prev_root = np.where(prev_tree >= 0, t.start[np.maximum(prev_tree, 0)], -1)
    prev_row = prev_root[t.tree_of_row] if t.n_rows else np.zeros(0, dtype=np.int64)
    # A root's parent is the previous position's token (or the prompt's last token at pos 0).
    last_prompt = {int(r["request_id"]): int(r["prompt_ids"][-1]) for r in trace.manifest["requests"] if r.get("prompt_ids")}
    root_parent_tok = np.where(prev_root >= 0, token[np.maximum(prev_root, 0)],
                               np.array([last_prompt.get(int(r), -1) for r in req_of_tree], dtype=np.int64))
    parent_token = np.where(depth > 0, token[np.maximum(parent_row, 0)], root_parent_tok[t.tree_of_row])
    roots = own[depth == 0]
    return DraftView(token, parent_token, depth, parent_row, prev_row, req_of_tree[t.tree_of_row],
                     t.tree_of_row, trace.nodes["draft_logprob"], [roots, *t.levels])


def request_mask(trace: Trace, requests: set[int] | list[int]) -> np.ndarray:
    """Node rows that belong to the given request ids."""
    return np.isin(draft_view(trace).request, np.asarray(sorted(requests), dtype=np.int64))


def request_ids(trace: Trace) -> list[int]:
    return [int(r["request_id"]) for r in trace.manifest["requests"]]


def fingerprint(trace: Trace) -> str:
    """A short content hash of a trace (shape, requests, tree structure, tokens, root routing):
    how a predictor file recognises the traces it was trained on, whatever their path."""
    return trace.derived("fingerprint", lambda: _fingerprint(trace))


def _fingerprint(trace: Trace) -> str:
    h = hashlib.sha256()
    m = trace.manifest
    h.update(json.dumps({"model": m["model"], "requests": [{k: r.get(k) for k in ("request_id", "positions")} for r in m["requests"]]},
                        sort_keys=True).encode())
    for col in ("request_id", "pos", "n_nodes"):
        h.update(np.ascontiguousarray(trace.positions[col]).tobytes())
    for col in ("parent", "token", "target_next"):
        h.update(np.ascontiguousarray(trace.nodes[col]).tobytes())
    h.update(np.ascontiguousarray(trace.nodes["experts"][trace.tree_start[:-1]], dtype=np.int16).tobytes())  # as stored
    return h.hexdigest()[:16]
