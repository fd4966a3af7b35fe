"""Every number a replay prints, defined once (README "Metrics" restates these).

- tokens: tokens produced; equals the trace's positions whatever the policy (the last step is
  cut at the end of the request).
- steps: verification steps of each request, summed over requests. A batched forward (des engine,
  --max-batch > 1) that verifies k requests counts k steps, so tokens_per_step is the mean
  accepted length + 1 whatever the batching (ar: exactly 1).
- tokens_per_step: tokens / steps = mean accepted length + 1.
- experts_per_step: expert_loads / steps: one request at a time, the mean over steps of the sum
  over MoE layers of the union size of the true experts of the verified nodes (distinct experts
  touched, not cache misses); batched, a forward's union is shared by the requests it verifies.
- expert_bytes_per_token: routed-expert bytes read from HBM per token (union x expert_bytes).
- pcie_bytes_per_token: expert bytes copied over PCIe per token (offload misses; 0 otherwise).
- time_s, time_per_token_s: simulated seconds, and per token.
- tokens_per_s: tokens / time_s, the decoding rate of one request stream (1 / time_per_token_s).
- speedup_vs_ar: time_per_token of `ar` / time_per_token of this policy, same cost model.
- oracle_fraction: time of the `oracle` bound / time of this policy (1.0 = as good as possible).
- provenance: the trace's, as the reader gives it (real, hybrid, synthetic); a total over traces
  of different provenances is `mixed`. `synthetic` (kept for readers of older results files) is
  derived: provenance is not `real`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Row:
    """One policy's replay of one trace (or the total over traces)."""

    trace: str
    provenance: str  # real, hybrid, synthetic (trace.io.provenance_of), or mixed for a total
    requests: int
    tokens: int
    steps: int
    verified: int  # tokens verified, roots included
    expert_loads: int  # sum over steps and MoE layers of union sizes
    expert_bytes: float
    pcie_bytes: float
    time_s: float
    speedup_vs_ar: float | None = None
    oracle_fraction: float | None = None
    draft_s: float = 0.0  # of time_s, the draft side's seconds (draft forwards and the engine's bookkeeping)
    draft_levels: float = 0.0  # draft forwards priced, summed over steps (each step's own, capped at the setting's N)

    @property
    def synthetic(self) -> bool:
        """Not a measurement throughout (hybrid, synthetic, or a total including either)."""
        return self.provenance != "real"

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def experts_per_step(self) -> float:
        return self.expert_loads / self.steps if self.steps else 0.0

    @property
    def expert_bytes_per_token(self) -> float:
        return self.expert_bytes / self.tokens if self.tokens else 0.0

    @property
    def time_per_token_s(self) -> float:
        return self.time_s / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.time_s if self.time_s else 0.0

    def compare(self, ar: Row, oracle: Row) -> Row:
        """Fill the ratios against `ar` and the `oracle` bound of the same trace(s)."""
        self.speedup_vs_ar = ar.time_per_token_s / self.time_per_token_s if self.time_s else None
        self.oracle_fraction = oracle.time_s / self.time_s if self.time_s else None
        return self

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.update(
            synthetic=self.synthetic,
            tokens_per_step=self.tokens_per_step,
            experts_per_step=self.experts_per_step,
            expert_bytes_per_token=self.expert_bytes_per_token,
            pcie_bytes_per_token=self.pcie_bytes / self.tokens if self.tokens else 0.0,
            time_per_token_s=self.time_per_token_s,
            tokens_per_s=self.tokens_per_s,
        )
        return d


def total(rows: list[Row], name: str = "total") -> Row:
    """Sums tokens, steps and time over traces; the ratios are recomputed from the sums."""
    return Row(
        trace=name,
        provenance=provenance_of_rows(rows),
        requests=sum(r.requests for r in rows),
        tokens=sum(r.tokens for r in rows),
        steps=sum(r.steps for r in rows),
        verified=sum(r.verified for r in rows),
        expert_loads=sum(r.expert_loads for r in rows),
        expert_bytes=sum(r.expert_bytes for r in rows),
        pcie_bytes=sum(r.pcie_bytes for r in rows),
        time_s=sum(r.time_s for r in rows),
        draft_s=sum(r.draft_s for r in rows),
        draft_levels=sum(r.draft_levels for r in rows),
    )


def provenance_of_rows(rows: list[Row]) -> str:
    """The one provenance the rows share, or `mixed` (no rows: `real`, as an empty total always was)."""
    kinds = {r.provenance for r in rows}
    return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "real")
