"""The fast engine: replay a policy over a trace, vectorised with numpy.

A replay in four moves, following TRACE_FORMAT.md's loop:
1. select a subtree at *every* position (selection never depends on the trajectory);
2. walk each request: from pos, step to pos + accepted + 1 (cheap: integers only);
3. pack the true experts of the selected nodes of the visited positions into bitsets and OR them
   into each step's union (per device under ep:N);
4. price the steps with the cost model (the offload cache is walked in step order).
Selections, walks and unions are cached per policy, so a sweep over bandwidths or devices
re-prices without re-selecting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ecosim import bitsets
from ecosim.cache import ExpertCache
from ecosim.cost import CostModel
from ecosim.metrics import Row
from ecosim.oracle import shortest_path
from ecosim.policies import PolicySpec, confidence_rank, ecospec_offsets, select_ar, select_confidence, select_ecospec
from ecosim.predictors import ExpertPredictor, get_predictor
from ecosim.trace.io import Trace
from ecosim.tree import Trees


@dataclass
class Steps:
    """The verification steps one policy takes through a trace, in the order they run."""

    request: np.ndarray  # request id of each step
    tree: np.ndarray  # index of the candidate tree (position row) each step verifies
    tokens: np.ndarray  # tokens the step yields (accepted + 1, cut at the request's end)
    verified: np.ndarray  # tokens verified (selected nodes, root included)
    bits: np.ndarray  # (steps, layers, words) union of the verified nodes' true experts
    context: np.ndarray  # context length before the root
    speculative: np.ndarray  # whether a draft tree was built for the step

    def __len__(self) -> int:
        return len(self.tree)


def walk(trees: Trees, accept: np.ndarray) -> np.ndarray:
    """Trees visited when each request steps from pos to pos + accept[pos] + 1."""
    visited: list[int] = []
    acc = accept.tolist()
    for _, sl in trees.request_slices():
        p, end = sl.start, sl.stop
        while p < end:
            visited.append(p)
            p += acc[p] + 1
    return np.asarray(visited, dtype=np.int64)


def union_bits(trace: Trace, trees: Trees, selected: np.ndarray, visited: np.ndarray) -> np.ndarray:
    """(steps, layers, words): OR of the true-expert bitsets of each visited tree's selected rows."""
    in_step = np.zeros(trees.n_trees, dtype=bool)
    in_step[visited] = True
    rows = np.flatnonzero(selected & in_step[trees.tree_of_row])
    step = np.cumsum(np.diff(trees.tree_of_row[rows], prepend=-1) != 0) - 1  # rows are in tree order
    n = int(step[-1]) + 1 if len(rows) else 0
    return bitsets.pack_groups(trace.experts_3d(), step, n, trace.model.num_experts, rows=rows)


@dataclass
class TraceReplay:
    """Replays of one trace under many policies and cost models, sharing what they can."""

    trace: Trace
    predictors: dict[str, ExpertPredictor] = field(default_factory=dict)
    _trees: Trees | None = None
    _predicted: dict[str, np.ndarray] = field(default_factory=dict)
    _steps: dict[PolicySpec, Steps] = field(default_factory=dict)
    _offsets: dict[str, np.ndarray] = field(default_factory=dict)
    _chain: tuple[np.ndarray, np.ndarray] | None = None
    _rank: np.ndarray | None = None
    _misses: dict[tuple[int, int, str], tuple[Steps, np.ndarray]] = field(default_factory=dict)

    @property
    def trees(self) -> Trees:
        if self._trees is None:
            self._trees = Trees(self.trace)
        return self._trees

    def predicted(self, name: str) -> np.ndarray:
        if name not in self._predicted:
            pred = self.predictors.get(name) or get_predictor(name)
            self._predicted[name] = pred.predict(self.trace)
        return self._predicted[name]

    def offsets(self, name: str) -> np.ndarray:
        """ecospec's buffer offsets of a predictor's experts (cached: no budget or lambda in them)."""
        if name not in self._offsets:
            self._offsets[name] = ecospec_offsets(self.predicted(name), self.trace.model.num_experts)
        return self._offsets[name]

    def confidence_rank(self) -> np.ndarray:
        """`confidence`'s rank of every node within its tree (cached: one sort serves every budget)."""
        if self._rank is None:
            self._rank = confidence_rank(self.trees)
        return self._rank

    def selection(self, spec: PolicySpec) -> np.ndarray:
        t = self.trees
        if spec.name == "ar":
            return select_ar(t)
        if spec.name == "confidence":
            return select_confidence(t, spec.budget, rank=self.confidence_rank())
        if spec.name == "ecospec":
            m = self.trace.model
            return select_ecospec(t, spec.budget, spec.lam, self.predicted(spec.predictor), m.num_experts, m.top_k, spec.score,
                                  offsets=self.offsets(spec.predictor) if spec.budget else None)
        raise ValueError(f"{spec.name} is not a selection policy")

    def steps(self, spec: PolicySpec) -> Steps:
        """Walk and unions of a selection policy (cached; independent of the cost model)."""
        key = self._key(spec)
        if key not in self._steps:
            t = self.trees
            selected = self.selection(spec)
            accept = t.selected_accept_len(selected)
            visited = walk(t, accept)
            self._steps[key] = self._make_steps(visited, accept[visited], t.selected_count(selected)[visited],
                                                union_bits(self.trace, t, selected, visited),
                                                np.full(len(visited), spec.speculative))
        return self._steps[key]

    def unions_everywhere(self, spec: PolicySpec) -> np.ndarray:
        """(positions, layers) union sizes of the policy's selection at *every* position (not only
        those its trajectory visits): what the tree would read wherever it were verified."""
        t = self.trees
        return bitsets.count(union_bits(self.trace, t, self.selection(spec), np.arange(t.n_trees)))

    def oracle_steps(self, cost: CostModel) -> Steps:
        """The shortest path of oracle.py under `cost` (every expert a hit under offload)."""
        t = self.trees
        prefix, first = self.chain_unions()
        cuts = t.chain.shape[1]
        a = np.arange(len(prefix)) - np.repeat(first, t.accept_len + 1)  # the cut of each prefix
        ctx = np.repeat(self.trace.positions["context_len"].astype(np.int64), t.accept_len + 1)
        priced = cost.step_times(self._union(prefix, cost), a + 1, ctx, speculative=False)
        draft = cost.draft_time(speculative=True)
        costs = np.full((t.n_trees, cuts), np.inf)  # cuts past A(p) are never taken
        costs[t.chain >= 0] = priced + np.where(a > 0, draft, 0.0)
        visited, taken = [], []
        for _, sl in t.request_slices():
            _, path = shortest_path(costs[sl], t.accept_len[sl])
            pos = sl.start + np.concatenate([[0], np.cumsum(path + 1)[:-1]])
            visited.append(pos)
            taken.append(path)
        v = np.concatenate(visited) if visited else np.zeros(0, dtype=np.int64)
        cut = np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)
        return self._make_steps(v, cut, cut + 1, prefix[first[v] + cut], cut > 0)

    def chain_unions(self) -> tuple[np.ndarray, np.ndarray]:
        """The oracle's cost-free part, cached: the union of the true experts of each accepted chain
        cut at every a <= A(p), (sum of A(p) + 1, layers, words) tree by tree, and the index of
        each tree's first (a = 0) entry."""
        if self._chain is None:
            t = self.trees
            on_chain = t.chain >= 0  # a prefix of each row: depths 0..A(p)
            prefix = bitsets.pack(self.trace.experts_3d()[t.chain[on_chain]], self.trace.model.num_experts)
            first = (np.cumsum(t.accept_len + 1) - (t.accept_len + 1)).astype(np.int64)
            for d in range(1, t.chain.shape[1]):
                at = first[t.accept_len >= d] + d
                prefix[at] |= prefix[at - 1]
            self._chain = (prefix, first)
        return self._chain

    def _make_steps(self, visited: np.ndarray, accept: np.ndarray, verified: np.ndarray, bits: np.ndarray,
                    speculative: np.ndarray) -> Steps:
        t = self.trees
        req = self.trace.positions["request_id"][visited]
        end = np.zeros(t.n_trees, dtype=np.int64)
        for _, sl in t.request_slices():
            end[sl] = sl.stop
        tokens = np.minimum(accept + 1, end[visited] - visited)
        ctx = self.trace.positions["context_len"][visited].astype(np.int64)
        return Steps(req, visited, tokens, verified, bits, ctx, speculative)

    @staticmethod
    def _key(spec: PolicySpec) -> PolicySpec:
        """Specs that select the same subtrees share one cache entry."""
        if spec.name == "ar":
            return PolicySpec("ar", 0, 0.0, "none")
        if spec.name == "confidence":
            return PolicySpec("confidence", spec.budget, 0.0, "none")
        return spec

    def _union(self, bits: np.ndarray, cost: CostModel) -> np.ndarray:
        if cost.placement.kind == "ep":
            masks = bitsets.device_masks(self.trace.model.num_experts, cost.placement.devices)
            return bitsets.count_per_device(bits, masks)
        return bitsets.count(bits)

    def price(self, steps: Steps, cost: CostModel, cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Seconds per step and PCIe misses per step (offload walks its cache in step order;
        `cache=False` prices every expert as a hit, as the oracle bound does)."""
        misses = self.cache_misses(steps, cost) if cost.placement.kind == "offload" and cache else None
        union = self._union(steps.bits, cost)
        times = cost.layer_times(union, steps.verified, misses).sum(axis=1)
        times = times + cost.other_times(steps.verified, steps.context, speculative=False)
        times = times + np.where(steps.speculative, cost.draft_time(speculative=True), 0.0)
        return times, (misses.sum(axis=1) if misses is not None else np.zeros(len(steps)))

    def cache_misses(self, steps: Steps, cost: CostModel) -> np.ndarray:
        """(steps, layers) misses of the offload cache walked along `steps`. Kept per (steps,
        capacity, eviction) for the steps this replay caches, since neither bandwidth nor device
        changes them."""
        p = cost.placement
        key = (id(steps), p.capacity, p.eviction)
        if key in self._misses and self._misses[key][0] is steps:
            return self._misses[key][1]
        m = self.trace.model
        cache = ExpertCache(m.num_moe_layers, m.num_experts, p.capacity, p.eviction)
        misses = np.stack([cache.access(b) for b in steps.bits]) if len(steps) else np.zeros((0, m.num_moe_layers))
        if any(steps is s for s in self._steps.values()):
            self._misses[key] = (steps, misses)
        return misses

    def run(self, spec: PolicySpec, cost: CostModel) -> Row:
        """One policy's totals over this trace."""
        steps = self.oracle_steps(cost) if spec.name == "oracle" else self.steps(spec)
        return summarize(self, steps, cost, cache=spec.name != "oracle")


def summarize(replay: TraceReplay, steps: Steps, cost: CostModel, cache: bool = True, requests: int | None = None) -> Row:
    """Price `steps` and total them into a Row for `replay`'s trace (of `requests` requests)."""
    times, misses = replay.price(steps, cost, cache=cache)
    loads = int(bitsets.count(steps.bits).sum()) if len(steps) else 0
    eb = float(replay.trace.model.expert_bytes)
    return Row(
        trace=replay.trace.name,
        synthetic=replay.trace.synthetic,
        requests=len(replay.trace.manifest["requests"]) if requests is None else requests,
        tokens=int(steps.tokens.sum()),
        steps=len(steps),
        verified=int(steps.verified.sum()),
        expert_loads=loads,
        expert_bytes=loads * eb,
        pcie_bytes=float(misses.sum()) * eb,
        time_s=float(times.sum()),
    )
