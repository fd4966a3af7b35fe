"""Selecting a subtree of the live draft tree with ecosim's own policy functions.

At each real step the draft's candidate tree is turned into a small in-memory ecosim `Trace`
(`live_trace`) and handed to the policy's registry entry, exactly what the simulator replays (a
policy that does not speculate verifies the root alone: no trace is built for it).
The trace holds two trees when the step is not the request's first: the previous position as a
one-node tree carrying the token and true experts the last verification measured (what a
predictor may know: ecosim/predictors/base.py), then the live tree. Nothing the target has not yet
computed is in it: `target_next` is -1 and the live nodes' experts are -1, except under the
`oracle` predictor, whose experts are the true ones taken from the trace recorded on the spot at
the same (request, position), node by node along equal token paths. A live node the recorded tree
lacks (the live draft can differ from the recorded one by float noise) makes the lookup fail; the
caller then peeks (an untimed forward of the whole live tree) instead.

A policy that selects by the cost model (`ecospec-auto`) gets the run's profile as its pricing and
the running rate carried from step to step (reset at the trace's first request, as the simulator
carries it along the trace); it runs live with the oracle predictor and raw values only, since its
calibrated values and a fitted predictor's union scale are fitted over a whole trace, not a live tree.

Predictors by kind (`freq`, `token`, `context`) are fitted as the simulator fits them
(ecosim.predictors.kfold): the recorded trace's requests dealt into folds, a request predicted by
the model of the other folds; predictor files are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ecosim.catalog.models import ModelShape
from ecosim.cost import CostModel
from ecosim.errors import EcoSimError
from ecosim.policies import Context, PolicySpec
from ecosim.predictors import ExpertPredictor, KINDS, get_predictor, reads_routing
from ecosim.trace.io import Trace
from ecosim.tree import Trees


@dataclass
class Prev:
    """The position before the root: its token and the true experts (layers, k) the target chose."""

    token: int
    experts: np.ndarray


def live_trace(manifest: dict[str, Any], rid: int, tokens: np.ndarray, parents: np.ndarray, depths: np.ndarray,
               draft_logprob: np.ndarray, prev: Prev | None, experts: np.ndarray | None, width: int) -> Trace:
    """A Trace of [prev as a one-node tree] + the live tree; `experts` (n, width) or None (unknown: -1)."""
    n = len(tokens)
    m = 1 if prev is not None else 0
    rows = n + m
    live_exp = np.full((n, width), -1, np.int16) if experts is None else np.asarray(experts, np.int16).reshape(n, width)
    if prev is not None:
        exp = np.concatenate([np.asarray(prev.experts, np.int16).reshape(1, width), live_exp])
        tok = np.concatenate([[prev.token], tokens])
        par = np.concatenate([[-1], parents])
        dep = np.concatenate([[0], depths])
        lq = np.concatenate([[0.0], draft_logprob])
    else:
        exp, tok, par, dep, lq = live_exp, tokens, parents, depths, draft_logprob
    nodes = {
        "request_id": np.full(rows, rid, np.int32),
        "pos": np.concatenate([np.zeros(m, np.int32), np.full(n, m, np.int32)]),
        "node": np.concatenate([np.zeros(m, np.int16), np.arange(n, dtype=np.int16)]),
        "parent": np.asarray(par, np.int16), "depth": np.asarray(dep, np.int8), "token": np.asarray(tok, np.int32),
        "draft_logprob": np.asarray(lq, np.float32), "target_next": np.full(rows, -1, np.int32),
        "target_logprob": np.full(rows, np.nan, np.float32), "experts": exp,
    }
    positions = {
        "request_id": np.full(m + 1, rid, np.int32), "pos": np.arange(m + 1, dtype=np.int32),
        "context_len": np.zeros(m + 1, np.int32), "n_nodes": np.array([1] * m + [n], np.int16),
    }
    return Trace(Path(f"live-{rid}"), manifest, positions, nodes)


class OracleLookup:
    """True experts of live nodes, from the recorded trace at the same (request, position)."""

    def __init__(self, recorded: Trace):
        self.trace = recorded
        pos = recorded.positions
        self.tree_of = {(int(r), int(p)): i for i, (r, p) in enumerate(zip(pos["request_id"], pos["pos"]))}
        self._paths: dict[int, dict[tuple[int, ...], int]] = {}

    def _path_index(self, t: int) -> dict[tuple[int, ...], int]:
        if t not in self._paths:
            a, b = int(self.trace.tree_start[t]), int(self.trace.tree_start[t + 1])
            tok = self.trace.nodes["token"][a:b].tolist()
            par = self.trace.nodes["parent"][a:b].tolist()
            keys: list[tuple[int, ...]] = []
            for i in range(b - a):
                keys.append((tok[i],) if par[i] < 0 else keys[par[i]] + (tok[i],))
            self._paths[t] = {k: a + i for i, k in enumerate(keys)}
        return self._paths[t]

    def experts(self, rid: int, pos: int, tokens: np.ndarray, parents: np.ndarray) -> np.ndarray | None:
        """(n, width) recorded experts of the live nodes, or None when the recorded tree lacks one."""
        t = self.tree_of.get((rid, pos))
        if t is None:
            return None
        index = self._path_index(t)
        keys: list[tuple[int, ...]] = []
        rows = []
        for tok, par in zip(tokens.tolist(), parents.tolist()):
            key = (tok,) if par < 0 else keys[par] + (tok,)
            keys.append(key)
            row = index.get(key)
            if row is None:
                return None
            rows.append(row)
        return self.trace.nodes["experts"][rows]


class Selector:
    """One policy, applied to live trees; `needs_true_experts` for a predictor that reads the routing (oracle)."""

    def __init__(self, spec: PolicySpec, shape: ModelShape, recorded: Trace | None = None,
                 predictor: ExpertPredictor | None = None, cost: CostModel | None = None):
        if spec.policy.is_bound:
            raise EcoSimError(f"{spec.name} is a bound, not a policy: it cannot be run")
        if spec.policy.priced:
            if cost is None:
                raise EcoSimError(f"{spec.name} selects by the cost model: give the run the profile it prices with "
                                  "(--hardware)")
            if spec.values.get("value") == "calibrated" or not reads_routing(spec.predictor):
                raise EcoSimError(f"{spec.name} runs live with --value raw and the oracle predictor only (its calibrated "
                                  "values and a fitted predictor's union scale are fitted per trace, not per live tree)")
        self.spec, self.shape, self.cost = spec, shape, cost
        # a priced policy's running rate (expected tokens, seconds), carried along the steps as the
        # simulator carries it along the trace: from zero at the trace's first request
        self.rate = np.zeros(2)
        self.first_request = int(recorded.manifest["requests"][0]["request_id"]) if recorded is not None else None
        self.width = shape.num_moe_layers * shape.top_k
        self.manifest_model = shape.to_manifest()
        self.needs_true_experts = reads_routing(spec.predictor)
        self.lookup: OracleLookup | None = None
        self._fold_models: dict[int, ExpertPredictor] = {}
        self._fold_of: dict[int, int] = {}
        self.predictor: ExpertPredictor | None = None
        if spec.predictor is None or spec.predictor == "none":
            return
        if self.needs_true_experts:
            if recorded is None:
                raise EcoSimError("the oracle predictor needs the trace recorded on the spot")
            self.lookup = OracleLookup(recorded)
            return
        self.predictor = predictor or get_predictor(spec.predictor)
        if spec.predictor in KINDS:
            if recorded is None:
                raise EcoSimError(f"predictor {spec.predictor!r} by name is fitted on the recorded trace's other requests")
            self._fit_folds(recorded)

    def _fit_folds(self, recorded: Trace) -> None:
        """The fold models of ecosim.predictors.kfold, fitted the same way (same seed, same deal)."""
        from ecosim.predictors import Shape
        from ecosim.predictors.kfold import KFoldPredictor
        from ecosim.predictors.train import TrainingRows, fit
        from ecosim.predictors.view import request_mask

        kf = self.predictor
        assert isinstance(kf, KFoldPredictor)
        self._fold_of = kf.fold_of(recorded)
        shape = Shape.of(recorded)
        for f in sorted(set(self._fold_of.values())):
            train = request_mask(recorded, [r for r, g in self._fold_of.items() if g != f])
            self._fold_models[f] = fit(kf.kind, shape, TrainingRows.gather([(recorded, train)]), kf.selection,
                                       seed=kf.seed, **kf.options)

    def manifest(self, rid: int, prompt_ids: list[int]) -> dict[str, Any]:
        """The live trace's manifest for one request (built once per request)."""
        return {"synthetic": False, "model": self.manifest_model, "draft": {}, "tree": {}, "decoding": {"mode": "greedy"},
                "requests": [{"request_id": rid, "task": "live", "prompt_ids": list(prompt_ids), "positions": 2}],
                "recorded_on": {}}

    def begin(self, rid: int) -> None:
        """A request starts: the running rate starts again at the trace's first request (a new pass)."""
        if rid == self.first_request:
            self.rate[:] = 0.0

    def true_experts(self, rid: int, pos: int, tokens: np.ndarray, parents: np.ndarray) -> np.ndarray | None:
        return self.lookup.experts(rid, pos, tokens, parents) if self.lookup is not None else None

    def select(self, manifest: dict[str, Any], rid: int, tokens: np.ndarray, parents: np.ndarray, depths: np.ndarray,
               draft_logprob: np.ndarray, prev: Prev | None, true: np.ndarray | None = None) -> np.ndarray:
        """Bool mask over the live tree's nodes: the root plus an ancestor-closed subtree."""
        spec = self.spec
        n = len(tokens)
        if not spec.speculative:  # the root alone: no trace needs building
            return depths == 0
        if self.predictor is None:
            prev = None  # only a predictor reads the previous position
        trace = live_trace(manifest, rid, tokens, parents, depths, draft_logprob, prev, true, self.width)

        def predicted(name: str) -> np.ndarray:
            if self.lookup is not None:
                if true is None:
                    raise EcoSimError("internal: the oracle predictor needs the live nodes' true experts")
                return trace.experts_3d()
            if self.predictor is None:  # predictor "none"
                return np.full((len(trace.nodes["node"]), self.shape.num_moe_layers, 1), -1, np.int16)
            model = self._fold_models.get(self._fold_of.get(rid, -1)) if self._fold_models else self.predictor
            if model is None:
                raise EcoSimError(f"request {rid} is not in the recorded trace the predictor was fitted on")
            return model.predict(trace)

        kept: dict = {("running rate",): self.rate} if spec.policy.priced else {}
        ctx = Context(Trees(trace), self.shape, predicted, lambda name: self.predictor or get_predictor(name),
                      lambda key, make: kept[key] if key in kept else kept.setdefault(key, make()),
                      cost=self.cost if spec.policy.priced else None)
        sel = spec.policy.selection(ctx, spec.values)
        return np.asarray(sel[len(sel) - n:], dtype=bool)
