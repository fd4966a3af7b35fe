"""`validate calibrate`: measure this hardware the way ecosim's cost model prices a step.

The cost model (ecosim/cost.py, full mode, one device) prices a verification step of n tokens
whose routed experts have union u_l in MoE layer l, after a context of c tokens, as

    t = sum_l comb(u_l * expert_bytes / bw, 2 n k expert_params / peak)
      + comb(dense_bytes / bw, 2 n dense_params / peak) + (c + n) kv_bytes / bw + overhead

(comb = + under overlap "sum", max under "max"), plus `draft_time` per speculative step. The four
unknowns (bw, peak, overhead, draft_time) are measured here from the model's own forwards, as
Vidur profiles its operators:

- verify: the live verification phase (decode.verify_subtree + keep_path, the same functions the
  decoder times) over n tokens after a context of c tokens (a window of the prompts and their
  continuations when given, random tokens otherwise), with the routing *forced* by a router hook
  (bench.py). Two designs:
  * trace (`--trace`, and always in `validate run`): subtrees of the recorded trees, cut by four
    growth rules (confidence order, random, fewest new experts first, most new experts first) at
    every n in `tokens` (`levels` single roots at n = 1), each with its recorded tree and routing,
    so the tokens per expert follow decoding's own distribution (trace_design);
  * grid (no trace): per layer a random set of u experts dealt round-robin over the n x k slots,
    n in `tokens` and u at up to `levels` values over [k, min(E, n k)], so tokens and union vary
    independently (grid_design).
  Every case runs `repeats` times at every c in `contexts`, in shuffled order; each case's median
  is fitted.
- draft: the live draft phase: expand the tree (depth, topk, max_nodes) with r accepted tokens fed
  in its first forward (r = 0..3 in turn; decode.draft_tree), select with `confidence` at
  `budget` on the live trace. One draft step runs before every verify run of more than one token,
  as speculative decoding alternates them (each phase then finds the caches as the other left
  them); one-token verify runs follow each other, as in plain decoding. The drafts' median is
  `draft_time_s`. (ecospec's selection costs more than confidence's; the difference is not in the
  profile, and `validate run` reports every policy's measured selection time.)

Fit: least squares weighted by 1/t (relative errors), non-negative coefficients. "sum" is linear
in [bytes, flops, 1] and solved exactly over every subset of active coefficients; "max" is fitted
by a log-grid search over (bw, peak), refined twice, with the overhead in closed form. The profile
is a JSON file of `ecosim.catalog.devices.Device` fields (efficiencies 1.0: the fitted numbers are
already effective) plus a `calibration` object: the design, the fit's residuals, versions.
`ecosim replay --hardware profile.json` reads it.

What `validate calibrate` prints, defined:
- bandwidth (hbm_bw): bytes per second at which a step's bytes (union x expert_bytes + dense_bytes
  + KV of context and tokens) are read; "not measurable" when time does not grow with them;
- compute (peak_bf16 = peak_fp8): FLOP/s of the per-token work (2 FLOPs per active parameter);
- overhead (step_overhead_s): fixed seconds per verification step;
- draft (draft_time_s): median seconds of a draft step (module docstring);
- rms error, worst: root mean square and maximum of (cost model - measured median) / measured
  median over the verify cases the fit was made on.
"""

from __future__ import annotations

import datetime as _dt
import gc
import itertools
import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.catalog.serving import ServingProfile
from ecosim.cost import CostConfig, CostModel
from ecosim.errors import EcoSimError
from ecosim.tree_config import TREE
from validate.clock import Clock

HUGE = 1e30  # bytes/s or FLOP/s standing for "no measurable time" (a zero coefficient in the fit)
MEASURABLE = 1e20  # a fitted rate above this (bytes/s, FLOP/s) is float noise around a zero coefficient


@dataclass(frozen=True)
class CalibConfig:
    """The microbenchmark design; each field is a `validate calibrate` option."""

    tokens: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    levels: int = 4
    contexts: tuple[int, ...] = (48, 160)
    repeats: int = 5
    warmup: int = 3
    depth: int = TREE.depth
    topk: int = TREE.topk
    max_nodes: int = TREE.max_nodes
    budget: int = 16
    overlap: str = "sum"
    seed: int = 0

    def check(self) -> None:
        if not self.tokens or min(self.tokens) < 1:
            raise EcoSimError("--tokens: give positive token counts, e.g. 1,2,4,8,16,32")
        if not self.contexts or min(self.contexts) < 1:
            raise EcoSimError("--contexts: give positive context lengths, e.g. 48,160")
        if self.levels < 1 or self.repeats < 1:
            raise EcoSimError("--levels and --repeats must be at least 1")
        if self.overlap not in ("sum", "max"):
            raise EcoSimError(f"--overlap must be sum or max, got {self.overlap!r}")


class Bench(Protocol):
    """What the measurement loop drives; `run_*` is the timed part, the rest is set-up."""

    shape: ModelShape

    def set_context(self, tokens: int) -> None: ...
    def prepare_verify(self, experts: np.ndarray, parents: np.ndarray | None = None) -> None: ...  # forced routing
    def run_verify(self) -> None: ...
    def after_verify(self) -> None: ...
    def prepare_draft(self, accepted: int) -> None: ...
    def run_draft(self) -> None: ...
    def after_draft(self) -> None: ...


@dataclass
class Case:
    """One verify forward to time: the routing to force, (n, layers, k), and the tree (None: random)."""

    experts: np.ndarray
    parents: np.ndarray | None = None
    kind: str = "grid"

    @property
    def n(self) -> int:
        return int(self.experts.shape[0])

    @property
    def union(self) -> list[int]:
        return [int(len(np.unique(self.experts[:, j]))) for j in range(self.experts.shape[1])]


@dataclass
class Samples:
    """Raw timings: verify runs (one row per run, with its case) and draft runs."""

    case: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    unions: list[list[int]] = field(default_factory=list)  # per layer
    contexts: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    draft_seconds: list[float] = field(default_factory=list)

    def cases(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per (case, context): n, unions (cases, layers), c, median seconds, runs."""
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (case, c) in enumerate(zip(self.case, self.contexts)):
            groups.setdefault((case, c), []).append(i)
        keys = sorted(groups)
        first = [groups[k][0] for k in keys]
        n = np.array([self.tokens[i] for i in first], dtype=np.int64)
        u = np.array([self.unions[i] for i in first], dtype=np.int64).reshape(len(keys), -1)
        c = np.array([self.contexts[i] for i in first], dtype=np.int64)
        med = np.array([float(np.median([self.seconds[i] for i in groups[k]])) for k in keys])
        runs = np.array([len(groups[k]) for k in keys])
        return n, u, c, med, runs

    def case_kinds(self) -> list[str]:
        groups: dict[tuple[int, int], str] = {}
        for case, c, kind in zip(self.case, self.contexts, self.kinds):
            groups.setdefault((case, c), kind)
        return [groups[k] for k in sorted(groups)]


def deal(n: int, u: int, layers: int, k: int, num_experts: int, rng: np.random.Generator) -> np.ndarray:
    """(n, layers, k) expert ids: per layer a random set of u experts dealt round-robin over the
    n*k slots, so each token's k ids are distinct and the layer's union is exactly u."""
    if not k <= u <= min(num_experts, n * k):
        raise ValueError(f"union {u} impossible for {n} tokens of top-{k} over {num_experts} experts")
    out = np.empty((n, layers, k), dtype=np.int64)
    slot = np.arange(n * k).reshape(n, k) % u
    for layer in range(layers):
        chosen = rng.permutation(num_experts)[:u]
        out[:, layer, :] = chosen[slot]
    return out


def union_levels(n: int, k: int, num_experts: int, levels: int) -> list[int]:
    lo, hi = k, min(num_experts, n * k)
    return sorted({int(round(x)) for x in np.linspace(lo, hi, levels)})


def grid_design(cfg: CalibConfig, shape: ModelShape, rng: np.random.Generator) -> list[Case]:
    """Tokens x union levels, routing dealt round-robin (every expert of a layer gets n k / u tokens)."""
    k, E, layers = shape.top_k, shape.num_experts, shape.num_moe_layers
    return [Case(deal(n, u, layers, k, E, rng), None, f"grid u={u}") for n in cfg.tokens for u in union_levels(n, k, E, cfg.levels)]


STRATEGIES = ("confidence", "random", "min-union", "max-union")


def _grow(parents: np.ndarray, cum: np.ndarray, experts: np.ndarray, n: int, strategy: str,
          rng: np.random.Generator) -> np.ndarray:
    """Node ids (sorted) of an ancestor-closed subtree of n nodes, grown from the root."""
    if strategy == "confidence":
        rest = sorted(range(1, len(parents)), key=lambda v: (-cum[v], v))[: n - 1]
        return np.array(sorted([0, *rest]))
    layers = experts.shape[1]
    chosen = [0]
    have = [set(experts[0, j].tolist()) for j in range(layers)]
    frontier = [v for v in range(1, len(parents)) if parents[v] == 0]
    while len(chosen) < n and frontier:
        if strategy == "random":
            v = frontier[int(rng.integers(len(frontier)))]
        else:
            new = [sum(len(set(experts[f, j].tolist()) - have[j]) for j in range(layers)) for f in frontier]
            sign = 1 if strategy == "min-union" else -1
            v = min(zip(frontier, new), key=lambda fv: (sign * fv[1], -cum[fv[0]], fv[0]))[0]
        chosen.append(v)
        frontier.remove(v)
        frontier += [c for c in range(v + 1, len(parents)) if parents[c] == v]
        for j in range(layers):
            have[j] |= set(experts[v, j].tolist())
    return np.array(sorted(chosen))


def trace_design(trace: Any, cfg: CalibConfig, rng: np.random.Generator) -> list[Case]:
    """Subtrees of the recorded trees, their recorded routing forced: for each n in `tokens`, one
    subtree per strategy (confidence order, random growth, growth adding the fewest / the most new
    experts) of a random tree with at least n nodes; for n = 1, `levels` random roots. The tokens
    per expert then follow decoding's own distribution, which matters where a kernel's cost per
    expert depends on it (CPU GEMMs switch algorithm at a few rows)."""
    from ecosim.tree import Trees

    t = Trees(trace)
    ex = trace.experts_3d().astype(np.int64)
    par_all = trace.nodes["parent"].astype(np.int64)
    out: list[Case] = []
    for n in cfg.tokens:
        big = np.flatnonzero(t.n_nodes >= n)
        if len(big) == 0:
            continue
        for strategy in (("root",) * cfg.levels if n == 1 else STRATEGIES):
            tree = int(big[rng.integers(len(big))])
            a, b = int(t.start[tree]), int(t.start[tree] + t.n_nodes[tree])
            parents, cum, experts = par_all[a:b], t.cum_logprob[a:b], ex[a:b]
            ids = _grow(parents, cum, experts, n, strategy, rng) if n > 1 else np.array([0])
            new = np.full(b - a, -1)
            new[ids] = np.arange(len(ids))
            sub_par = np.where(parents[ids] >= 0, new[np.maximum(parents[ids], 0)], -1)
            out.append(Case(experts[ids], sub_par, f"trace {strategy}"))
    return out


class Calibration:
    """The design's runs in a seeded shuffled order, run a slice at a time (`step`), so that a
    caller can interleave them with other work (`validate run` spreads them between its decoding
    rounds, so both meet the same load from other processes)."""

    def __init__(self, bench: Bench, clock: Clock, cfg: CalibConfig, design: list[Case] | None = None):
        cfg.check()
        self.bench, self.clock, self.cfg = bench, clock, cfg
        rng = np.random.default_rng(cfg.seed)
        self.cases = design if design is not None else grid_design(cfg, bench.shape, rng)
        if not self.cases:
            raise EcoSimError("calibration: the design has no cases")
        runs = [(i, c) for c in cfg.contexts for i in range(len(self.cases)) for _ in range(cfg.repeats)]
        self.runs = [runs[j] for j in rng.permutation(len(runs))]
        self.done = 0
        self.trial = 0
        self.warm: set[int] = set()
        self.samples = Samples()

    @property
    def remaining(self) -> int:
        return len(self.runs) - self.done

    def step(self, count: int | None = None, progress: Any = None) -> int:
        """Run the next `count` runs (all that remain by default); returns how many remain."""
        bench, clock, out = self.bench, self.clock, self.samples
        end = len(self.runs) if count is None else min(len(self.runs), self.done + max(0, count))
        gc_was = gc.isenabled()
        gc.disable()
        try:
            while self.done < end:
                i, c = self.runs[self.done]
                case = self.cases[i]
                bench.set_context(c)
                if c not in self.warm:  # first use of a context: untimed runs to settle it
                    self.warm.add(c)
                    big = max(self.cases, key=lambda x: x.n)
                    for _ in range(self.cfg.warmup):
                        _draft(bench, clock, 0)
                        bench.prepare_verify(big.experts, big.parents)
                        bench.run_verify()
                        bench.after_verify()
                # a draft step, then a verify, as speculative decoding alternates them (each leaves the
                # caches in the state the other finds them in during a real run); a one-token verify
                # follows the previous verify directly, as in plain (ar) decoding
                if case.n > 1:
                    out.draft_seconds.append(_draft(bench, clock, self.trial % 4))
                    self.trial += 1
                bench.prepare_verify(case.experts, case.parents)
                t0 = clock.now()
                bench.run_verify()
                t1 = clock.now()
                bench.after_verify()
                out.case.append(int(i))
                out.kinds.append(case.kind)
                out.tokens.append(case.n)
                out.unions.append(case.union)
                out.contexts.append(c)
                out.seconds.append(t1 - t0)
                self.done += 1
                if progress:
                    progress()
        finally:
            if gc_was:
                gc.enable()
        return self.remaining


def measure(bench: Bench, clock: Clock, cfg: CalibConfig, design: list[Case] | None = None, progress: Any = None) -> Samples:
    """Time every case of `design` (default: the grid) `repeats` times at every context, in a
    shuffled order, each verify of more than one token after a timed draft step."""
    cal = Calibration(bench, clock, cfg, design)
    cal.step(progress=progress)
    return cal.samples


def _draft(bench: Bench, clock: Clock, accepted: int) -> float:
    bench.prepare_draft(accepted)
    t0 = clock.now()
    bench.run_draft()
    t1 = clock.now()
    bench.after_draft()
    return t1 - t0


# ------------------------------------------------------------------------------------------ fitting


@dataclass
class Fit:
    """Fitted hardware parameters and how well they explain the medians they were fitted on."""

    bw: float  # bytes/s (HUGE: no measurable byte-dependent time)
    peak: float  # FLOP/s (HUGE: no measurable per-token compute)
    overhead_s: float
    draft_time_s: float
    overlap: str
    cases: int
    rel_rmse: float  # root mean square of (predicted - measured) / measured over the cases
    max_rel_err: float
    r2: float
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _features(shape: ModelShape, n: np.ndarray, u: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and FLOPs of each case as the cost model counts them (overlap "sum")."""
    m = shape
    nbytes = u.sum(axis=1) * float(m.expert_bytes) + float(m.dense_bytes) + (c + n) * float(m.kv_bytes_per_token)
    flops = 2.0 * n * (m.top_k * m.num_moe_layers * float(m.expert_params) + m.dense_params)
    return nbytes, flops


def _nnls_weighted(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """min ||w (X b - y)|| with b >= 0, by trying every subset of active columns (few columns)."""
    best, best_err = np.zeros(X.shape[1]), np.inf
    Xw, yw = X * w[:, None], y * w
    for r in range(1, X.shape[1] + 1):
        for cols in itertools.combinations(range(X.shape[1]), r):
            b, *_ = np.linalg.lstsq(Xw[:, cols], yw, rcond=None)
            if (b < 0).any():
                continue
            full = np.zeros(X.shape[1])
            full[list(cols)] = b
            err = float(np.sum((Xw @ full - yw) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def _max_model(shape: ModelShape, n: np.ndarray, u: np.ndarray, c: np.ndarray, bw: float, peak: float) -> np.ndarray:
    """Seconds of each case under overlap "max", without the overhead."""
    m = shape
    layer = np.maximum(u * float(m.expert_bytes) / bw, (2.0 * n * m.top_k * float(m.expert_params) / peak)[:, None]).sum(axis=1)
    dense = np.maximum(float(m.dense_bytes) / bw, 2.0 * n * m.dense_params / peak)
    return layer + dense + (c + n) * float(m.kv_bytes_per_token) / bw


def fit(samples: Samples, shape: ModelShape, overlap: str = "sum") -> Fit:
    """Least-squares fit of the cost model to the medians of `samples` (module docstring)."""
    n, u, c, y, _ = samples.cases()
    if len(y) < 3:
        raise EcoSimError(f"calibration: {len(y)} distinct cases; at least 3 are needed to fit")
    if not samples.draft_seconds:
        raise EcoSimError("calibration: no draft timings")
    w = 1.0 / y
    nbytes, flops = _features(shape, n, u, c)
    if overlap == "sum":
        coef = _nnls_weighted(np.stack([nbytes, flops, np.ones_like(y)], axis=1), y, w)
        bw = 1.0 / coef[0] if coef[0] > 1.0 / MEASURABLE else HUGE
        peak = 1.0 / coef[1] if coef[1] > 1.0 / MEASURABLE else HUGE
        overhead = float(coef[2])
    else:
        bw, peak, overhead = _fit_max(shape, n, u, c, y, w, nbytes, flops)
    fit_ = Fit(bw, peak, overhead, float(np.median(samples.draft_seconds)), overlap, len(y), 0.0, 0.0, 0.0)
    pred = predict(fit_, shape, n, u, c)
    rel = (pred - y) / y
    fit_.rel_rmse = float(np.sqrt(np.mean(rel**2)))
    fit_.max_rel_err = float(np.max(np.abs(rel)))
    fit_.r2 = float(1.0 - np.sum((pred - y) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-300))
    if fit_.bw >= HUGE:
        fit_.warnings.append("time does not grow with the bytes read: no bandwidth could be fitted (the model is "
                             "overhead-bound here; widen its experts with tracer.widen to make expert reads count)")
    if fit_.rel_rmse > 0.1:
        fit_.warnings.append(f"the fit misses the measured medians by {fit_.rel_rmse:.0%} rms: noisy timings "
                             "(other load on the machine?) or a device the cost model's form does not describe")
    return fit_


def _fit_max(shape, n, u, c, y, w, nbytes, flops) -> tuple[float, float, float]:
    """Grid search over (bw, peak) in logs, three passes, overhead = weighted mean residual (>= 0)."""
    # start around the "sum" solution's scale: bytes/time and flops/time of the cases
    bw_c = float(np.median(nbytes / y))
    pk_c = float(np.median(flops / y))
    lo_bw, hi_bw = np.log(bw_c) - np.log(100), np.log(bw_c) + np.log(100)
    lo_pk, hi_pk = np.log(pk_c) - np.log(1e3), np.log(pk_c) + np.log(1e6)
    best = (np.inf, bw_c, pk_c, 0.0)
    ww = w**2
    for _ in range(3):
        for lb in np.linspace(lo_bw, hi_bw, 41):
            for lp in np.linspace(lo_pk, hi_pk, 41):
                base = _max_model(shape, n, u, c, float(np.exp(lb)), float(np.exp(lp)))
                ov = max(0.0, float(np.sum(ww * (y - base)) / np.sum(ww)))
                err = float(np.sum(ww * (base + ov - y) ** 2))
                if err < best[0]:
                    best = (err, float(np.exp(lb)), float(np.exp(lp)), ov)
        step_b, step_p = (hi_bw - lo_bw) / 40, (hi_pk - lo_pk) / 40
        lo_bw, hi_bw = np.log(best[1]) - 2 * step_b, np.log(best[1]) + 2 * step_b
        lo_pk, hi_pk = np.log(best[2]) - 2 * step_p, np.log(best[2]) + 2 * step_p
    return best[1], best[2], best[3]


def device_of(fit_: Fit, name: str, memory_bytes: float, link_bw: float | None = None, pcie_bw: float | None = None,
              source: str = "") -> Device:
    """The Device a fit describes (unmeasured links default to the fitted bandwidth), carrying its
    serving terms in the format of ecosim's serving profiles (catalog/serving.py): the measured step
    overhead and overlap, efficiencies 1 (the fitted rates are already achieved ones), and zero
    per-kernel and collective terms (one device, fitted as a whole step)."""
    serving = ServingProfile(name=f"calibrated {name}", step_fixed_s=fit_.overhead_s, overlap=fit_.overlap,
                             source=f"validate calibrate: {source}")
    return Device(serving=serving, 
        name=name, hbm_bw=fit_.bw, hbm_bytes=float(memory_bytes), peak_bf16=fit_.peak, peak_fp8=fit_.peak,
        link_bw=float(link_bw or fit_.bw), pcie_bw=float(pcie_bw or fit_.bw), step_overhead_s=fit_.overhead_s,
        bw_efficiency=1.0, compute_efficiency=1.0, overlap=fit_.overlap, draft_time_s=fit_.draft_time_s, source=source,
    )


def predict(fit_: Fit, shape: ModelShape, n: np.ndarray, u: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Verify seconds of cases through ecosim's CostModel itself (not a copy of its formula)."""
    cost = CostModel(shape, device_of(fit_, "fit", 0.0), config=CostConfig())
    return cost.step_times(u.astype(np.float64), n, c, speculative=False)


# ------------------------------------------------------------------------------------- the profile


def profile(fit_: Fit, cfg: CalibConfig, samples: Samples, shape: ModelShape, info: dict[str, Any]) -> dict[str, Any]:
    """The profile JSON: Device fields, then `calibration` (design, fit, samples, environment)."""
    dev = device_of(fit_, info["name"], info["memory_bytes"], info.get("link_bw"), info.get("pcie_bw"), info["source"])
    n, u, c, y, runs = samples.cases()
    pred = predict(fit_, shape, n, u, c)
    return {
        **dev.to_dict(),
        "calibration": {
            "by": "validate calibrate",
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "model": shape.name,
            "expert_bytes": shape.expert_bytes,
            "dense_bytes": shape.dense_bytes,
            "environment": info.get("environment", {}),
            "design": asdict(cfg),
            "fit": fit_.to_dict(),
            "unmeasured": info.get("unmeasured", []),
            "cases": [
                {"kind": kd, "tokens": int(a), "union_per_layer": [int(x) for x in b], "context": int(cc), "runs": int(r),
                 "median_s": float(m), "predicted_s": float(p)}
                for kd, a, b, cc, r, m, p in zip(samples.case_kinds(), n, u, c, runs, y, pred)
            ],
            "draft_seconds": [float(x) for x in samples.draft_seconds],
        },
    }


def memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
