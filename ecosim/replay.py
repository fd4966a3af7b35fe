"""The fast engine: replay a policy over a trace, vectorised with numpy.

A replay in four moves, following TRACE_FORMAT.md's loop:
1. select a subtree at *every* position (selection never depends on the trajectory);
2. walk each request: from pos, step to pos + accepted + 1 (cheap: integers only);
3. pack the true experts of the selected nodes of the visited positions into bitsets and OR them
   into each step's union (per device under ep:N);
4. price the steps with the cost model (the offload cache is walked in step order).
Selections, walks and unions are cached per policy, so a sweep over bandwidths or devices
re-prices without re-selecting. Policies whose selections come out identical (ecospec at
different lambdas or budgets often does) share one walk, one set of unions and one cache walk,
and a priced row is kept per (selection, cost model): nothing about a row depends on the knobs
that produced the selection, only on the selection itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

from ecosim import bitsets
from ecosim.cache import ExpertCache
from ecosim.cost import CostModel
from ecosim.metrics import Row
from ecosim.oracle import shortest_path
from ecosim.policies import PolicySpec, confidence_rank, ecospec_offsets, ecospec_order, select_ar, select_confidence
from ecosim.predictors import ExpertPredictor, get_predictor
from ecosim.predictors.base import OraclePredictor
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
    _digests: dict[PolicySpec, bytes] = field(default_factory=dict)  # selection fingerprints
    _masks: dict[PolicySpec, np.ndarray] = field(default_factory=dict)  # selections fingerprinted, not yet walked
    _shared: dict[tuple[bytes, bool], Steps] = field(default_factory=dict)  # steps by selection
    _rows: dict[tuple[bytes, bool, tuple], Row] = field(default_factory=dict)  # priced rows by selection
    _orders: dict[tuple[float, str, str], tuple[int, np.ndarray]] = field(default_factory=dict)  # ecospec pick orders

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
            # the true routing of a trace read with its checks has no repeated ids in a layer
            distinct = isinstance(self.predictors.get(name) or get_predictor(name), OraclePredictor)
            self._offsets[name] = ecospec_offsets(self.predicted(name), self.trace.model.num_experts, distinct=distinct)
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
            return (t.depth == 0) | (self.ecospec_order(spec) < spec.budget)
        raise ValueError(f"{spec.name} is not a selection policy")

    def ecospec_order(self, spec: PolicySpec) -> np.ndarray:
        """ecospec's pick order for spec's lambda, predictor and score, grown to at least its budget
        (cached: a run at budget B serves every budget <= B; see policies.ecospec_order)."""
        key = (spec.lam, spec.predictor, spec.score)
        if key not in self._orders or self._orders[key][0] < spec.budget:
            m = self.trace.model
            order = ecospec_order(self.trees, spec.budget, spec.lam, self.predicted(spec.predictor), m.num_experts, m.top_k,
                                  spec.score, offsets=self.offsets(spec.predictor) if spec.budget else None)
            self._orders[key] = (spec.budget, order)
        return self._orders[key][1]

    def steps(self, spec: PolicySpec) -> Steps:
        """Walk and unions of a selection policy (cached; independent of the cost model). Specs
        whose selections are identical share one Steps object (and so its cache walks)."""
        key = self._key(spec)
        if key not in self._steps:
            t = self.trees
            selected = self._masks.pop(key, None)
            if selected is None:
                selected = self.selection(spec)
            shared = (self._digests.setdefault(key, _digest(selected)), spec.speculative)
            if shared not in self._shared:
                accept = t.selected_accept_len(selected)
                visited = walk(t, accept)
                self._shared[shared] = self._make_steps(visited, accept[visited], t.selected_count(selected)[visited],
                                                        union_bits(self.trace, t, selected, visited),
                                                        np.full(len(visited), spec.speculative))
            self._steps[key] = self._shared[shared]
        return self._steps[key]

    def digest(self, spec: PolicySpec) -> bytes:
        """A fingerprint of the policy's selection at every position (selecting it if need be; the
        mask is kept for `steps` until it is used)."""
        key = self._key(spec)
        if key not in self._digests:
            selected = self.selection(spec)
            self._digests[key] = _digest(selected)
            if key not in self._steps:
                self._masks[key] = selected
        return self._digests[key]

    def forget(self) -> None:
        """Drop what is kept per selection (steps, cache walks, priced rows); keep what is kept per
        trace (trees, predictions and offsets, confidence ranks, chain unions)."""
        for kept in (self._steps, self._misses, self._digests, self._masks, self._shared, self._rows, self._orders):
            kept.clear()

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
        misses = ExpertCache(m.num_moe_layers, m.num_experts, p.capacity, p.eviction).walk(steps.bits)
        if any(steps is s for s in self._steps.values()):
            self._misses[key] = (steps, misses)
        return misses

    def run(self, spec: PolicySpec, cost: CostModel) -> Row:
        """One policy's totals over this trace."""
        if spec.name == "oracle":
            return summarize(self, self.oracle_steps(cost), cost, cache=False)
        key = (self.digest(spec), spec.speculative, _cost_key(cost))
        if key not in self._rows:
            self._rows[key] = summarize(self, self.steps(spec), cost)
        self._masks.pop(self._key(spec), None)
        return replace(self._rows[key])  # a copy: callers fill in its ratios


def _digest(selected: np.ndarray) -> bytes:
    return hashlib.blake2b(np.packbits(selected).tobytes(), digest_size=16).digest()


def _cost_key(cost: CostModel) -> tuple:
    """Everything a priced row depends on besides the steps (all frozen, hashable values)."""
    return (cost.model, cost.device, cost.placement, cost.config, cost.tree_depth, cost.draft_bytes)


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
