"""The fast engine: replay a policy over a trace, vectorised with numpy.

A replay in four moves, following docs/TRACE_FORMAT.md's loop:
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
import stat
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ecosim import bitsets
from ecosim.memo import Memo
from ecosim.cost import CostModel
from ecosim.metrics import Row
from ecosim.oracle import shortest_path
from ecosim.errors import EcoSimError
from ecosim.policies import Context, PolicySpec
from ecosim.policies.base import ALL_STEPS, picked
from ecosim.predictors import ExpertPredictor, get_predictor
from ecosim.predictors.sets import PredictedSets
from ecosim.trace.io import Trace
from ecosim.steps import Steps, make_row, union_bits, walk
from ecosim.tree import Trees


# How long what TraceReplay keeps lives:
TRACE = "trace"  # per trace, whatever the policy: predictions, ranks, offsets, the oracle's chain unions
ROWS = "rows"  # priced rows by (selection fingerprint, cost model): shared by a worker's views
ORDERS = "orders"  # ordered policies' pick orders, by knobs less the budget (one serves every budget)
SELECTIONS = ("masks", "digests", "steps", "misses")  # per selection: its mask until walked, its
# fingerprint, its walk and unions (shared by identical selections), its offload cache walks


def no_positions(path: object) -> str:
    """The refusal of a trace that holds no position to replay (valid as a file: `ecosim check` accepts it)."""
    return f"{path}: no positions to replay (its requests hold 0 positions); a replay needs at least one"


@dataclass
class TraceReplay:
    """Replays of one trace under many policies and cost models, sharing what they can (see `Memo`
    and the kinds above: nothing is keyed by object identity)."""

    trace: Trace
    predictors: dict[str, ExpertPredictor] = field(default_factory=dict)
    memo: Memo = field(default_factory=Memo)
    _trees: Trees | None = None

    def __post_init__(self) -> None:
        if self.trace.positions and not len(self.trace.positions["pos"]):  # figures of nothing would print as 0 ms
            raise EcoSimError(no_positions(self.trace.path))

    @property
    def trees(self) -> Trees:
        if self._trees is None:
            self._trees = Trees(self.trace)
        return self._trees

    @classmethod
    def of(cls, trace: Trace) -> TraceReplay:
        """A replay of `trace` that shares the per-trace work and priced rows of every earlier
        `of(trace)` (kept with the trace, as long as it lives): a repeated `ecosim.replay` of one
        Trace pays for its trees, predictions and tables once, and then only for its selections."""
        return trace.derived("replay", lambda: cls(trace)).view()

    def predictor(self, name: str) -> ExpertPredictor:
        """A predictor by name (the ones given first), loaded once per trace (and per version of
        a predictor file: a retrained file is loaded again)."""
        return self.memo.get(TRACE, ("predictor", name, *_stamp(name)), lambda: self.predictors.get(name) or get_predictor(name))

    def predicted(self, name: str) -> PredictedSets:
        return self.memo.get(TRACE, ("predicted", name, *_stamp(name)), lambda: self.predictor(name).predict_sets(self.trace))

    def context(self, cost: CostModel | None = None) -> Context:
        return Context(self.trees, self.trace.model, self.predicted, self.predictor,
                       lambda key, make: self.memo.get(TRACE, key, make), cost)

    def _key(self, spec: PolicySpec, cost: CostModel | None) -> tuple:
        """What a selection depends on: the spec's cache key, and the pricing for a priced policy."""
        return spec.cache_key() + ((_cost_key(cost),) if spec.policy.priced else ())

    def selection(self, spec: PolicySpec, cost: CostModel | None = None) -> np.ndarray:
        """The policy's mask at every position. An ordered policy's pick order is kept by its knobs
        less the budget and grown when a larger budget asks: one order serves every smaller budget."""
        policy = spec.policy
        if policy.priced and cost is None:
            raise EcoSimError(f"policy {spec.name} selects by the cost model: give one")
        ctx = self.context(cost if policy.priced else None)
        if policy.order is None:
            return policy.selection(ctx, spec.values)
        budget = spec.values[policy.budget]
        key = spec.cache_key(without=policy.budget) + ((_cost_key(cost),) if policy.priced else ())
        kept = self.memo.peek(ORDERS, key)
        if kept is None or kept[0] < budget:
            order, covers = policy.order(ctx, spec.values)
            kept = (covers, order)
            self.memo.put(ORDERS, key, kept)
        return picked(self.trees, kept[1], budget)

    def digest(self, spec: PolicySpec, cost: CostModel | None = None) -> bytes:
        """A fingerprint of the policy's selection at every position (selecting it if need be; the
        mask is kept for `steps` until it is walked)."""
        key = self._key(spec, cost)

        def make() -> bytes:
            selected = self.selection(spec, cost)
            self.memo.put("masks", key, selected)
            return _digest(selected)

        return self.memo.get("digests", key, make)

    def steps(self, spec: PolicySpec, cost: CostModel | None = None) -> Steps:
        """Walk and unions of a selection policy (cached; independent of the cost model unless the
        policy is priced). Specs whose selections are identical share one Steps object."""
        key = self._key(spec, cost)
        shared = self._shared(spec, cost)

        def make() -> Steps:
            selected = self.memo.pop("masks", key)
            if selected is None:
                selected = self.selection(spec, cost)
            t = self.trees
            accept = t.selected_accept_len(selected)
            visited = walk(t, accept)
            count = t.selected_count(selected)[visited]
            drafted = spec.policy.draft_steps(spec.values, count, t.selected_depth(selected)[visited])
            return self._make_steps(visited, accept[visited], count, union_bits(self.trace, t, selected, visited), drafted)

        steps = self.memo.get("steps", shared, make)
        self.memo.pop("masks", key)
        return steps

    def forget(self) -> None:
        """Drop what is kept per selection (steps, cache walks, priced rows, pick orders); keep what
        is kept per trace (trees, predictions, ranks and offsets, the oracle's chain unions)."""
        self.memo.drop(ROWS, ORDERS, *SELECTIONS)

    def forget_steps(self) -> None:
        """Drop the walks, unions and cache walks of the selections made so far; keep pick orders
        and priced rows (a sweep task ends: the next one reuses those)."""
        self.memo.drop(*SELECTIONS)

    def view(self) -> TraceReplay:
        """A replay of the same trace that shares its per-trace work and its priced rows, with its
        own pick orders and selections (a sweep worker's batch: dropped when the batch ends)."""
        self.trees  # built once, before the view copies the reference
        return TraceReplay(self.trace, self.predictors, self.memo.share(TRACE, ROWS), self._trees)

    def run_selection(self, selected: np.ndarray, cost: CostModel) -> Row:
        """Totals of a selection given as a mask over node rows (a static tree a caller built)."""
        return summarize(self, self.selection_steps(selected), cost)

    def selection_steps(self, selected: np.ndarray) -> Steps:
        """The steps of a selection given as a mask over node rows, a step drafting all the
        setting's steps wherever it verifies more than the root (either engine prices them)."""
        t = self.trees
        accept = t.selected_accept_len(selected)
        visited = walk(t, accept)
        count = t.selected_count(selected)[visited]
        drafted = np.where(count > 1, ALL_STEPS, 0.0)
        return self._make_steps(visited, accept[visited], count, union_bits(self.trace, t, selected, visited), drafted)

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
        priced = cost.moe_seconds(prefix, a + 1) + cost.other_times(a + 1, ctx, speculative=False)
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
        return self._make_steps(v, cut, cut + 1, prefix[first[v] + cut], np.where(cut > 0, ALL_STEPS, 0.0))

    def chain_unions(self) -> tuple[np.ndarray, np.ndarray]:
        """The oracle's cost-free part, cached: the union of the true experts of each accepted chain
        cut at every a <= A(p), (sum of A(p) + 1, layers, words) tree by tree, and the index of
        each tree's first (a = 0) entry."""
        return self.memo.get(TRACE, "chain unions", self._chain_unions)

    def _chain_unions(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.trees
        on_chain = t.chain >= 0  # a prefix of each row: depths 0..A(p)
        prefix = bitsets.pack(self.trace.experts_3d()[t.chain[on_chain]], self.trace.model.num_experts)
        first = (np.cumsum(t.accept_len + 1) - (t.accept_len + 1)).astype(np.int64)
        for d in range(1, t.chain.shape[1]):
            at = first[t.accept_len >= d] + d
            prefix[at] |= prefix[at - 1]
        return prefix, first

    def _make_steps(self, visited: np.ndarray, accept: np.ndarray, verified: np.ndarray, bits: np.ndarray,
                    drafted: np.ndarray) -> Steps:
        t = self.trees
        req = self.trace.positions["request_id"][visited]
        end = np.zeros(t.n_trees, dtype=np.int64)
        for _, sl in t.request_slices():
            end[sl] = sl.stop
        tokens = np.minimum(accept + 1, end[visited] - visited)
        ctx = self.trace.positions["context_len"][visited].astype(np.int64)
        return Steps(req, visited, tokens, verified, bits, ctx, drafted)

    def price(self, steps: Steps, cost: CostModel, cache: bool = True, key: Hashable | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Seconds per step and PCIe misses per step (offload walks its cache in step order;
        `cache=False` prices every expert as a hit, as the oracle bound does). `key` names the
        selection the steps are of, so their cache walks are kept."""
        misses = self.cache_misses(steps, cost, key) if cost.placement.stateful and cache else None
        times = cost.moe_seconds(steps.bits, steps.verified, misses)
        times = times + cost.other_times(steps.verified, steps.context, speculative=False)
        times = times + cost.draft_times(steps.drafted)
        return times, (misses.sum(axis=1) if misses is not None else np.zeros(len(steps)))

    def cache_misses(self, steps: Steps, cost: CostModel, key: Hashable | None = None) -> np.ndarray:
        """(steps, layers) misses of the offload cache walked along `steps`. Kept per (selection
        `key`, capacity, eviction) when a key is given, since neither bandwidth nor device changes them."""
        p = cost.placement

        def make() -> np.ndarray:
            cache = p.cache(self.trace.model)
            assert cache is not None, "only a stateful placement has cache misses"
            return cache.walk(steps.bits)

        if key is None:
            return make()
        return self.memo.get("misses", (key, p), make)

    def run(self, spec: PolicySpec, cost: CostModel) -> Row:
        """One policy's totals over this trace (the bound's shortest path for the bound)."""
        if spec.policy.is_bound:
            return summarize(self, self.oracle_steps(cost), cost, cache=False)
        shared = self._shared(spec, cost)
        row = self.memo.get(ROWS, (*shared, _cost_key(cost)),
                            lambda: summarize(self, self.steps(spec, cost), cost, key=shared))
        self.memo.pop("masks", self._key(spec, cost))
        return replace(row)  # a copy: callers fill in its ratios

    def request_totals(self, spec: PolicySpec, cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, tokens) of each request, requests in id order: the steps `run` totals, with the
        same kept cache walks, summed per request (for tuning a setting on some requests and scoring
        it on others)."""
        if spec.policy.is_bound:
            steps = self.oracle_steps(cost)
            times, _ = self.price(steps, cost, cache=False)
        else:
            steps = self.steps(spec, cost)
            times, _ = self.price(steps, cost, key=self._shared(spec, cost))
        ids, inv = np.unique(steps.request, return_inverse=True)
        return np.bincount(inv, times, len(ids)), np.bincount(inv, steps.tokens, len(ids)).astype(np.float64)

    def _shared(self, spec: PolicySpec, cost: CostModel) -> tuple:
        """What a priced row depends on besides the cost: the selection, and the steps its steps
        draft (the policy's drafting rule and own steps)."""
        return (self.digest(spec, cost), spec.policy.drafting_key(spec.values))


def _stamp(name: str) -> tuple[int, ...]:
    """A predictor file's (modification time, size), so kept predictions follow a retrained file;
    () for a predictor named by kind."""
    try:
        st = Path(name).stat()
    except (OSError, ValueError):
        return ()
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else ()


def _digest(selected: np.ndarray) -> bytes:
    return hashlib.blake2b(np.packbits(selected).tobytes(), digest_size=16).digest()


def _cost_key(cost: CostModel) -> tuple:
    """Everything a priced row depends on besides the steps (all frozen, hashable values)."""
    return (cost.model, cost.device, cost.placement, cost.config, cost.tree_depth, cost.draft)


def summarize(replay: TraceReplay, steps: Steps, cost: CostModel, cache: bool = True, requests: int | None = None,
              key: Hashable | None = None) -> Row:
    """Price `steps` and total them into a Row for `replay`'s trace (of `requests` requests)."""
    times, misses = replay.price(steps, cost, cache=cache, key=key)
    loads = int(bitsets.count(steps.bits).sum()) if len(steps) else 0
    levels = float(cost.draft_levels(steps.drafted).sum())
    draft = float(cost.draft_times(steps.drafted).sum())
    return make_row(replay.trace, steps, len(steps), loads, float(misses.sum()), float(times.sum()), requests,
                    expert_bytes=cost.model.expert_bytes, draft_s=draft, draft_levels=levels)
