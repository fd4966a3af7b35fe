"""The discrete-event engine (simpy): what needs time to interleave.

It runs the same steps as the fast engine (a request's trajectory does not depend on batching)
but as events on timelines:
- requests arrive (one after another, all at once, Poisson, from a file, or from N clients that
  each send their next request when the last one ends: `concurrency:N`, how users benchmark a
  server) and a server batches up to `max_batch` active requests into one verification forward
  whose per-layer union is taken over all of them;
- each MoE layer runs on every device at once (ep:N: per-device timelines, the layer ends with
  the slowest device, then the all-to-all);
- under offload a copy engine brings each layer's misses over PCIe; with `prefetch` it runs
  ahead of compute (layer l+1's copy overlaps layer l's compute), without it each layer waits for
  its own copy, which is what the fast engine prices.
With one request at a time and no prefetch both engines price every step with the same formulas
in the same order, so their totals agree to rounding (a test holds them to 1e-9).

Where nothing interleaves (one request verified at a time: `max_batch` 1, or sequential arrivals,
under which only one request is ever active, so `max_batch` batches nothing; and no prefetch under
offload) and no timeline is asked for, the events are not run: the steps are priced as the fast
engine prices them and one compiled loop advances the clock exactly as the events would (each
layer's slowest device, its collectives, its copy, then the rest of the step, added to the clock
in the same order), so every figure is the event engine's, bit for bit (tests/test_speed.py runs
both), at about the fast engine's speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy
from numba import njit

from ecosim import bitsets
from ecosim.cost import CostModel, host_layer_times
from ecosim.arrivals import arrival_times, clients
from ecosim.errors import EcoSimError
from ecosim.metrics import Row
from ecosim.policies import PolicySpec
from ecosim.replay import TraceReplay
from ecosim.steps import Steps, make_row
from ecosim.trace.io import Trace


@dataclass(frozen=True)
class DesConfig:
    """How requests arrive and share the device; each field is an `ecosim replay` option."""

    arrivals: str = "sequential"  # sequential | together | poisson:RATE (requests/s) | concurrency:N | FILE (JSON list of seconds)
    max_batch: int = 1
    prefetch: bool = False
    seed: int = 0
    timeline: bool = False  # keep the Chrome trace events (runs the events even where nothing interleaves)

    @property
    def interleaves(self) -> bool:
        """Whether two requests can share a forward: a batch, with arrivals that let two be active."""
        return self.max_batch > 1 and self.arrivals != "sequential" and clients(self.arrivals) != 1

    @property
    def closed_loop(self) -> bool:
        """Clients that wait for a request's end before sending the next: served as events (a
        queue forms behind a batch of one too)."""
        return (clients(self.arrivals) or 1) > 1


# Time to first token needs the prefill's cost; a trace records the decoded positions only (no
# routing of the prompt's tokens), so the engine does not price a prefill and says so.
TTFT_NOT_MODELLED = "not modelled (the trace records no routing of the prompt, so prefill is not priced)"


def _percentiles(x: list[float], qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    a = np.asarray(x, dtype=np.float64) if x else np.zeros(1)
    return {f"p{q}": float(np.percentile(a, q)) for q in qs}


@dataclass
class DesResult:
    row: Row
    latencies_s: list[float]
    makespan_s: float
    events: list[dict[str, object]] = field(default_factory=list)  # Chrome trace events
    forwards: int = 0  # verification forwards (a batched forward verifies several requests)
    first_step_s: list[float] = field(default_factory=list)  # per request: arrival -> end of its first step
    inter_token_s: list[float] = field(default_factory=list)  # one sample per token after a request's first step
    request_tokens: list[int] = field(default_factory=list)  # per request (as latencies_s): tokens it generated

    def serving(self) -> dict[str, object]:
        """The serving metrics of ecosim/metrics.py (README "Metrics"), as printed and in --json."""
        return {
            "forwards": self.forwards,
            "makespan_s": self.makespan_s,
            "throughput_tokens_per_s": self.row.tokens / self.makespan_s if self.makespan_s else 0.0,
            "throughput_requests_per_s": len(self.latencies_s) / self.makespan_s if self.makespan_s else 0.0,
            "request_latency_s": _percentiles(self.latencies_s),
            "first_step_latency_s": _percentiles(self.first_step_s),
            "inter_token_latency_s": _percentiles(self.inter_token_s),
            # what users report as a request's speed: its tokens over its time from sent to done;
            # the slow end (p10, p1) is the one a service level is about
            "request_tokens_per_s": _percentiles([n / t for n, t in zip(self.request_tokens, self.latencies_s) if t > 0],
                                                 (50, 10, 1)),
            "ttft_s": TTFT_NOT_MODELLED,
        }


class _Server:
    """One model instance serving batched verification steps."""

    def __init__(self, env: simpy.Environment, replay: TraceReplay, steps: Steps, cost: CostModel, cfg: DesConfig):
        self.env, self.cost, self.cfg = env, cost, cfg
        m = replay.trace.model
        self.layers = m.num_moe_layers
        self.num_experts = m.num_experts
        self.devices = cost.placement.groups  # one timeline per expert group (its tp devices run in step)
        self.cache = cost.placement.cache(m)
        self.copy_engine = simpy.Resource(env, capacity=1)
        self.steps = steps
        ids = [int(r["request_id"]) for r in replay.trace.manifest["requests"]]
        self.steps_of = {rid: np.flatnonzero(steps.request == rid) for rid in ids}
        self.queue = {rid: list(q) for rid, q in self.steps_of.items()}
        self.order = [rid for rid in ids if self.queue[rid]]
        self.active: list[int] = []
        self.wake = env.event()
        self.busy = 0.0
        self.loads = 0
        self.misses = 0
        self.drafts: list[float] = []  # each forward's draft seconds, summed as the fast path sums them (metrics.Row)
        self.draft_levels = 0.0
        self.finished: dict[int, float] = {}
        self.done: dict[int, simpy.Event] = {}
        self.n_steps = 0
        self.arrived: dict[int, float] = {}
        self.last_end: dict[int, float] = {}  # end of each request's latest step
        self.first_step: dict[int, float] = {}
        self.inter_token: list[float] = []
        self.events: list[dict[str, object]] = []

    def arrive(self, rid: int) -> simpy.Event:
        """Admit a request; the returned event fires when its last step ends."""
        self.arrived[rid] = self.env.now
        self.done[rid] = self.env.event()
        self.active.append(rid)
        if not self.wake.triggered:
            self.wake.succeed()
        return self.done[rid]

    def _span(self, name: str, tid: str, start: float, end: float) -> None:
        self.events.append({"name": name, "ph": "X", "ts": start * 1e6, "dur": (end - start) * 1e6, "pid": 0, "tid": tid})

    def serve(self):  # simpy process
        while len(self.finished) < len(self.order):
            if not self.active:
                self.wake = self.env.event()
                yield self.wake
                continue
            batch = self.active[: self.cfg.max_batch]
            idx = [self.queue[rid].pop(0) for rid in batch]
            start = self.env.now
            yield from self._step(np.asarray(idx))
            self._span(f"step x{len(batch)}", "step", start, self.env.now)
            self.busy += self.env.now - start
            self.n_steps += 1
            for rid, i in zip(batch, idx):
                if rid in self.last_end:  # ITL: the gap since this request's previous step, per token it yields
                    gap = self.env.now - self.last_end[rid]
                    self.inter_token.extend([gap / int(self.steps.tokens[i])] * int(self.steps.tokens[i]))
                else:
                    self.first_step[rid] = self.env.now - self.arrived[rid]
                self.last_end[rid] = self.env.now
            for rid in batch:
                if not self.queue[rid]:
                    self.active.remove(rid)
                    self.finished[rid] = self.env.now
                    self.done[rid].succeed()

    def _step(self, idx: np.ndarray):
        s, cost = self.steps, self.cost
        union = np.bitwise_or.reduce(s.bits[idx], axis=0)  # (layers, words)
        tokens = np.array([s.verified[idx].sum()])
        context = np.array([s.context[idx].sum()])
        self.loads += int(bitsets.count(union).sum())
        per_device = cost.placement.union_per_group(union[None], self.num_experts)  # (1, layers, groups)
        device_t = cost.device_layer_times(per_device, tokens)[0]
        if cost.host_mask is not None:  # layers whose experts the host computes (cpu-moe[:N], cpu): ecosim/cost/host.py
            device_t[cost.host_mask, 0] = host_layer_times(cost, per_device[:, cost.host_mask, 0], tokens)[0]
        a2a = float(cost.collective_time(tokens)[0])
        copy_t = np.zeros(self.layers)
        if self.cache is not None:
            misses = self.cache.access(union)
            self.misses += int(misses.sum())
            copy_t = cost.copy_time(misses)
        copies = [self.env.event() for _ in range(self.layers)]
        if self.cache is not None and self.cfg.prefetch:
            self.env.process(self._copy_ahead(copy_t, copies))
        for layer in range(self.layers):
            if self.cache is not None:
                if self.cfg.prefetch:
                    yield copies[layer]
                elif copy_t[layer] > 0:
                    t0 = self.env.now
                    yield self.env.timeout(copy_t[layer])
                    self._span(f"copy L{layer}", "pcie", t0, self.env.now)
            t0 = self.env.now
            done = [self.env.timeout(float(device_t[layer, d])) for d in range(self.devices)]
            yield simpy.AllOf(self.env, done)
            for d in range(self.devices):
                self._span(f"moe L{layer}", f"device {d}", t0, t0 + float(device_t[layer, d]))
            if a2a > 0:
                t0 = self.env.now
                yield self.env.timeout(a2a)
                self._span(f"collectives L{layer}", "link", t0, self.env.now)
        other = float(cost.other_times(tokens, context, speculative=False)[0])
        draft = float(cost.draft_times(s.drafted[idx]).max(initial=0.0))  # the batch drafts its deepest step's steps
        self.drafts.append(draft)
        self.draft_levels += float(cost.draft_levels(s.drafted[idx]).max(initial=0.0))
        other += draft
        t0 = self.env.now
        yield self.env.timeout(other)
        self._span("dense+attention+overhead+draft", "device 0", t0, self.env.now)

    def _copy_ahead(self, copy_t: np.ndarray, copies: list[simpy.Event]):
        with self.copy_engine.request() as req:
            yield req
            for layer, t in enumerate(copy_t):
                t0 = self.env.now
                yield self.env.timeout(float(t))
                self._span(f"prefetch L{layer}", "pcie", t0, self.env.now)
                copies[layer].succeed()


@dataclass
class DesReplay:
    """The event engine as a simulate.Engine: selection policies run as events; the bound is a
    shortest path, not a trajectory, so it comes from the fast engine. Each run's timeline events
    are kept by spec (the CLI writes one to a Chrome trace)."""

    replay: TraceReplay
    cfg: DesConfig = field(default_factory=DesConfig)
    events: dict[PolicySpec, list[dict[str, object]]] = field(default_factory=dict)
    serving: dict[PolicySpec, dict[str, object]] = field(default_factory=dict)  # DesResult.serving() by spec

    @property
    def trace(self) -> Trace:
        return self.replay.trace

    def run(self, spec: PolicySpec, cost: CostModel) -> Row:
        if spec.policy.is_bound:
            return self.replay.run(spec, cost)
        result = des_run(self.replay, spec, cost, self.cfg)
        self.events[spec] = result.events
        self.serving[spec] = result.serving()
        return result.row


def des_run(replay: TraceReplay, spec: PolicySpec, cost: CostModel, cfg: DesConfig = DesConfig()) -> DesResult:
    """Replay one policy over one trace on the event engine."""
    if spec.policy.is_bound:
        raise EcoSimError(f"{spec.name} is a bound computed by dynamic programming; use --engine fast for it")
    return des_steps(replay, replay.steps(spec, cost), cost, cfg)


def des_steps(replay: TraceReplay, steps: Steps, cost: CostModel, cfg: DesConfig = DesConfig()) -> DesResult:
    """Serve the steps of one selection (a policy's, or a static tree's: TraceReplay.selection_steps)."""
    if cfg.max_batch < 1:
        raise EcoSimError(f"--max-batch must be >= 1, got {cfg.max_batch}")
    n_clients = clients(cfg.arrivals)
    if not (cfg.timeline or cfg.interleaves or cfg.closed_loop or (cost.placement.stateful and cfg.prefetch)):
        return _one_at_a_time(replay, steps, cost, cfg)
    env = simpy.Environment()
    server = _Server(env, replay, steps, cost, cfg)
    times = None if n_clients else arrival_times(cfg.arrivals, len(server.order), cfg.seed)

    def sequential():
        for rid in server.order:
            yield server.arrive(rid)

    def scheduled(at: list[float]):
        for rid, t in sorted(zip(server.order, at), key=lambda x: x[1]):
            if t > env.now:
                yield env.timeout(t - env.now)
            server.arrive(rid)

    pending = iter(server.order)

    def client():  # sends its next request when its last one ends (the clients share one queue)
        for rid in pending:
            yield server.arrive(rid)

    env.process(server.serve())
    if n_clients:
        for _ in range(min(n_clients, len(server.order))):
            env.process(client())
    elif times is None:
        env.process(sequential())
    else:
        env.process(scheduled(times))
    env.run()
    # steps per request: a forward verifying k requests is k steps (metrics.py)
    row = make_row(replay.trace, steps, len(steps.tokens), server.loads, server.misses, server.busy,
                   draft_s=float(np.sum(server.drafts)), draft_levels=server.draft_levels)
    latencies = [server.finished[r] - server.arrived[r] for r in server.order]
    return DesResult(row, latencies, float(env.now), server.events, server.n_steps,
                     [server.first_step[r] for r in server.order], server.inter_token,
                     [int(steps.tokens[server.steps_of[r]].sum()) for r in server.order])


def _one_at_a_time(replay: TraceReplay, steps: Steps, cost: CostModel, cfg: DesConfig) -> DesResult:
    """The event engine's figures where one request is verified at a time and nothing overlaps
    (see the module docstring): requests are served first come, first served, each to its end."""
    m = replay.trace.model
    ids = [int(r["request_id"]) for r in replay.trace.manifest["requests"]]
    per_request = [np.flatnonzero(steps.request == rid) for rid in ids]
    order = [rid for rid, q in zip(ids, per_request) if len(q)]
    queues = {rid: q for rid, q in zip(ids, per_request)}
    at = arrival_times(cfg.arrivals, len(order), cfg.seed)
    if at is None:
        served, arrive = order, np.full(len(order), -1.0)  # -1: when the previous request finishes
    else:
        ranked = sorted(zip(order, at), key=lambda x: x[1])
        served, now, arrive = [r for r, _ in ranked], 0.0, np.empty(len(ranked))
        for i, (_, t) in enumerate(ranked):  # the arrival process's clock: now + (t - now), as its timeouts add
            if t > now:
                now = now + (t - now)
            arrive[i] = now
    idx = np.concatenate([queues[r] for r in served]) if served else np.zeros(0, dtype=np.int64)
    bounds = np.cumsum([0] + [len(queues[r]) for r in served])
    union = cost.placement.union_per_group(steps.bits[idx], m.num_experts)
    device = cost.device_layer_times(union, steps.verified[idx]).max(axis=-1)
    if cost.host_mask is not None:  # layers whose experts the host computes (cpu-moe[:N], cpu): ecosim/cost/host.py
        device[:, cost.host_mask] = host_layer_times(cost, union[:, cost.host_mask, 0], steps.verified[idx])
    a2a = cost.collective_time(steps.verified[idx])
    copy = np.zeros((0, device.shape[1]))
    misses = 0
    if cost.placement.stateful:
        cache = cost.placement.cache(m)
        assert cache is not None
        missed = cache.walk(steps.bits[idx])
        misses, copy = int(missed.sum()), cost.copy_time(missed)
    other = cost.other_times(steps.verified[idx], steps.context[idx], speculative=False)
    draft = cost.draft_times(steps.drafted[idx])  # each step's own draft steps (policies/base.py DRAFTING_RULE)
    other = other + draft
    end, arrived, busy = _clock(device, copy, a2a, other, bounds, arrive)
    loads = int(bitsets.count(steps.bits).sum()) if len(steps) else 0
    row = make_row(replay.trace, steps, len(steps.tokens), loads, misses, busy, draft_s=float(draft.sum()),
                   draft_levels=float(cost.draft_levels(steps.drafted[idx]).sum()))
    first = bounds[:-1]
    last = bounds[1:] - 1
    later = np.ones(len(idx), dtype=bool)
    later[first] = False
    tokens = steps.tokens[idx].astype(np.int64)
    gaps = np.diff(end, prepend=0.0)[later] / tokens[later]
    inter_token = np.repeat(gaps, tokens[later]).tolist()
    by_request = dict(zip(served, zip(arrived, end[first], end[last])))
    return DesResult(row, [float(by_request[r][2] - by_request[r][0]) for r in order],
                     float(end[-1]) if len(end) else 0.0, [], len(idx),
                     [float(by_request[r][1] - by_request[r][0]) for r in order], inter_token,
                     [int(steps.tokens[queues[r]].sum()) for r in order])


@njit(cache=True)
def _clock(device, copy, a2a, other, bounds, arrive):
    """The event clock over steps served one at a time: (end of each step, arrival of each request,
    busy seconds). A request arrives at `arrive` (-1: when the previous one finishes) and its steps
    run back to back; within a step the clock adds each layer's copy (when there is one), its
    slowest device and its collectives, then the rest of the step, as the events' timeouts do."""
    end = np.empty(device.shape[0])
    arrived = np.empty(len(bounds) - 1)
    now, busy = 0.0, 0.0
    has_copy = copy.shape[0] > 0
    for r in range(len(bounds) - 1):
        if arrive[r] >= 0.0 and arrive[r] > now:
            now = arrive[r]
        arrived[r] = arrive[r] if arrive[r] >= 0.0 else now
        for i in range(bounds[r], bounds[r + 1]):
            start = now
            for layer in range(device.shape[1]):
                if has_copy and copy[i, layer] > 0:
                    now = now + copy[i, layer]
                now = now + device[i, layer]
                if a2a[i] > 0:
                    now = now + a2a[i]
            now = now + other[i]
            busy += now - start
            end[i] = now
    return end, arrived, busy
