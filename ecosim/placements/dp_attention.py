"""`dpattn+ep:N`: data-parallel attention with expert-parallel MoE over N devices, as SGLang serves
DeepSeek-V3 with `--enable-dp-attention --ep-size N` (dense MLP layers data parallel as well,
`--moe-dense-tp-size 1`).

Every device holds the whole attention and dense weights and serves its own requests; the routed
experts are split in contiguous blocks as under `ep:N`. At batch 1 one device runs the request's
attention and dense layers alone: it reads all the dense bytes and holds the whole KV cache
(`dense_share` 1, no all-reduce), and each MoE layer sends the token to the expert groups and back
(two all-to-alls; the layer waits for the slowest group). Against `ep:N` it trades the attention
all-reduce of every layer for N times the dense reads on one device: DP attention pays off in
batch throughput (no KV duplicated per request across devices), and this placement shows what it
costs at batch 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecosim.placements.sharded import Sharded, _degree


@dataclass(frozen=True)
class DpAttentionExpertParallel(Sharded):
    syntax = "dpattn+ep:N"
    summary = "dpattn+ep:N (attention and dense layers data parallel, experts split over N devices)"

    @classmethod
    def parse(cls, text: str) -> DpAttentionExpertParallel | None:
        head, plus, rest = text.partition("+")
        n = _degree(rest, "ep") if head == "dpattn" and plus else None
        return cls(ep=n) if n else None

    def __str__(self) -> str:
        return f"dpattn+ep:{self.ep}"

    @property
    def dense_share(self) -> int:
        return 1  # attention, dense layers and the KV cache stay whole on the request's device

    def allreduces(self, moe: bool) -> int:
        return 0  # attention is local; the MoE layer's all-to-alls (inherited) are its only collectives
