"""The step cost model: one verification forward of the selected subtree -> seconds.

A batch-1 step verifying n tokens after a context of c tokens, on D devices of a placement, costs

    t_step = T_step + K tau_k + L K_x (tau_x + g)                            fixed: step, kernels
           + sum_layers [ A_l (tau_c + tau_l + 2 (D-1)/D * n h a / B_link)        all-reduces
                        + X_l (tau_c + tau_l + (G-1)/G * n k h a / B_link) ]     all-to-alls
           + sum_moe_layers max_g comb( u_lg f e / (beta B),  2 n k P_e / (D pi eta(m_l)) )
           + comb( W_dense / D / (beta B),  2 n P_dense / (D pi eta_0) )
           + (c + n) kappa / D / (beta B)                                           attention (KV)
           [+ misses_l e / B_pcie  before layer l                             offload:CAP]
           [+ d (K_d tau_k + W_d / D / (beta B) + C_d)                speculative steps: d draft forwards,
              + (K_spec + d K_level) tau_k + d T_level                  its bookkeeping (drafts.py)
              + [not spec_overlap] T_sync]                              d <= N: policies/base.py DRAFTING_RULE

with the model's shape (catalog/models.py): K kernels on the layers' critical paths (kernels_per_step), L decoder layers,
e bytes per routed expert, P_e its parameters, k = top_k, h hidden size, kappa KV bytes per
token, W_dense / P_dense the dense bytes / parameters, a = 2 bytes per activation (BF16);
the placement (placements/): u_lg distinct experts of layer l's union read by expert group g, f
the fraction of an expert a device reads (1/tp), G expert groups, A_l / X_l all-reduces /
all-to-alls of layer l; the device (catalog/devices.py): B HBM bandwidth, pi dense peak
(FP8 where weights are <= 1 byte), B_link, tau_l the link's own latency per collective (0 within
a node; an inter-node fabric's hops), B_pcie, g the platform's graph-replay cost per kernel node
beyond the NVIDIA reference (0 on NVIDIA); and the serving profile (catalog/serving.py): T_step,
tau_k = kernel_latency_s + g, K_x the kernels per layer an older engine release launches beyond K's fused count
(extra_layer_kernels, 0 for a current engine) and tau_x the cost of each of those tiny kernels (extra_kernel_s), tau_c, beta, eta_0, the speculative step's kernels K_spec (tree mask, accept walk,
KV compaction) and K_level per draft level (top-k, parent select), its exposed host time T_sync
(zero where the engine overlaps it: spec_overlap), and the grouped-GEMM efficiency

    eta(m) = eta_0 * min(1, m / tile_rows),   m = n k / U_l  tokens per expert of the layer

(a tile of `tile_rows` rows is computed whatever the tokens in it; tile_rows 0: no quantisation).
comb = max (memory and compute overlap: GPUs) or + (CPUs: `validate calibrate` fits both).

`--cost experts-only` keeps only the routed experts' bytes at the raw bandwidth:
t_step = sum over layers of max_g u_lg f e / B (no compute, dense, attention, fixed terms,
collectives or draft time), so a number can be checked by hand. Nothing here knows about time
ordering; the engines decide which steps happen and in what state (see replay.py and des.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ecosim.catalog.devices import Device
from ecosim.catalog.drafts import DraftCost
from ecosim.catalog.dtypes import at_dtype
from ecosim.catalog.hosts import Host
from ecosim.catalog.models import ModelShape
from ecosim.catalog.serving import ServingProfile
from ecosim.cost.host import host_layer_times
from ecosim.cost.terms import ACT_BYTES, CostConfig, Terms, cost_doc
from ecosim.errors import InternalError
from ecosim.placements import Hbm, Placement

__all__ = ["ACT_BYTES", "NOT_MODELLED", "CostConfig", "CostModel", "Terms", "cost_doc", "host_layer_times"]


PRICE_BLOCK = 1 << 20  # (step, layer, group) entries priced at a time: bounded temporaries


def _block(per_step: int) -> int:
    """Steps priced at a time: at most PRICE_BLOCK (step, layer, group) entries."""
    return max(1, PRICE_BLOCK // max(1, per_step))

# The costs the model leaves out; printed with every replay so nobody mistakes them for modelled.
NOT_MODELLED = (
    "kernel time beyond a fixed latency per kernel and the bytes and FLOPs it moves",
    "load imbalance inside a device's experts (tokens per expert averaged over the layer)",
    "KV-cache growth beyond the context length recorded in the trace",
)


@dataclass
class CostModel:
    """Prices steps for one model shape on one device and placement."""

    model: ModelShape
    device: Device
    placement: Placement = field(default_factory=Hbm)
    config: CostConfig = field(default_factory=CostConfig)
    tree_depth: int = 0  # the setting's draft steps N: at most N draft forwards per step (the trace's depth, cut or recorded)
    draft: DraftCost | None = None  # one draft forward's cost; None: no draft model
    terms: Terms = field(init=False)
    engine: ServingProfile = field(init=False)  # the serving profile in force (its host_* terms price host layers)
    host_mask: np.ndarray | None = field(init=False)  # (MoE layers,) the layers whose experts the host computes

    def __post_init__(self) -> None:
        if self.config.dtype is not None:  # --dtype: the shape's weights stored at that type (catalog/dtypes.py)
            self.model = at_dtype(self.model, self.config.dtype)
        self.host_mask = self.placement.host_layers(self.model)
        if self.host_mask is not None and not self.host_mask.any():
            self.host_mask = None
        if self.config.host is not None and self.config.host.unified:  # one memory: the host is the device
            self.device = self.config.host.as_device()
        if self.placement.on_host or self.host_mask is not None:
            from ecosim.placements.host_capacity import need_host

            host = need_host(self.placement, self.config.host)
            if self.placement.on_host or host.unified:  # the host is the device (hosts.py: Host.as_device)
                self.device = host.as_device()
        self.terms = Terms.resolve(self.config, self.device)
        self.placement.check_model(self.model)  # ep:64 on 32 experts: refused before any pricing
        self.engine = Terms.profile(self.config, self.device)

    @property
    def host(self) -> Host | None:
        return self.config.host

    @property
    def experts_only(self) -> bool:
        return self.config.mode == "experts-only"

    @property
    def bw(self) -> float:
        """Achieved HBM bandwidth (bytes/s); the raw peak under experts-only."""
        return self.device.hbm_bw * (1.0 if self.experts_only else self.terms.bw_efficiency)

    @property
    def peak(self) -> float:
        raw = self.device.peak_fp8 if self.model.bytes_per_param <= 1.0 else self.device.peak_bf16
        return raw * self.terms.compute_efficiency

    @property
    def kernel_s(self) -> float:
        """Seconds per kernel on the critical path: tau_k = the serving profile's latency plus the platform's
        own graph-replay cost per kernel node (the device's graph_node_s: 0 on NVIDIA, the reference)."""
        return self.terms.kernel_latency_s + (0.0 if self.experts_only else self.device.graph_node_s)

    @property
    def extra_kernels(self) -> float:
        """L K_x: the kernels the serving profile says its engine release launches beyond the model's
        fused count, on every decoder layer (0 for a current engine)."""
        return self.model.num_layers * self.terms.extra_layer_kernels

    @property
    def kernels(self) -> int | float:
        """Kernels on a step's critical path: K + L K_x (a whole number unless a profile declares a
        fractional K_x)."""
        k = self.model.kernels_per_step + self.extra_kernels
        return int(k) if float(k).is_integer() else k

    @property
    def step_overhead(self) -> float:
        """Fixed seconds per step: T_step + K tau_k + L K_x (tau_x + g) (0 under experts-only)."""
        if self.experts_only:
            return 0.0
        graph = self.device.graph_node_s  # every graph node pays the platform's own replay cost
        return self.terms.step_fixed_s + self.model.kernels_per_step * self.kernel_s + self.extra_kernels * (self.terms.extra_kernel_s + graph)

    def check(self, context_tokens: int) -> None:
        """Refuse a placement whose weights and KV do not fit a device (placements/base.py)."""
        self.placement.check(self.model, self.device, context_tokens, self.terms.memory_fraction, host=self.config.host)

    def draft_forward_time(self) -> float:
        """Seconds of one draft forward: its kernels, its bytes (sharded like the dense weights)
        and, on several devices, its layers' collectives for one token (0 without a draft)."""
        d = self.draft
        if d is None or self.experts_only:
            return 0.0
        t = d.forward_kernels * self.kernel_s + d.forward_bytes / self.placement.dense_share / self.bw
        one = np.ones(1)
        dense = (d.layers - d.moe_layers) * self.collective_time(one, moe=False)
        return float(t + dense[0] + d.moe_layers * self.collective_time(one, moe=True)[0])

    def spec_bookkeeping_time(self, steps: float | None = None) -> float:
        """Seconds a speculative step of `steps` draft levels (default: `tree_depth`) spends outside
        the draft's and the target's forwards: its kernels (per step and per draft level) and the
        host time its sync exposes, unless the engine overlaps it (the serving profile's spec_* fields)."""
        t = self.terms
        d = self.tree_depth if steps is None else steps
        kernels = (t.spec_step_kernels + d * t.spec_level_kernels) * self.kernel_s
        return kernels + d * t.spec_level_s + (0.0 if t.spec_overlap else t.spec_sync_s)

    def _draft_time(self, speculative: bool, steps: float | None = None) -> float:
        """Seconds of the draft side of one speculative step (0 for plain steps): d = `steps` draft
        forwards (default `tree_depth`, the setting's N) plus the bookkeeping of d levels
        (drafts.py); --draft-time replaces it all, whatever d. A step of 0 steps drafts nothing."""
        if self.experts_only or not speculative or (steps is not None and steps <= 0):
            return 0.0
        d = self.tree_depth if steps is None else steps
        if self.terms.draft_time_s is not None:
            return self.terms.draft_time_s
        if self.draft is None:
            return 0.0
        return d * self.draft_forward_time() + self.spec_bookkeeping_time(d)

    def draft_levels(self, drafted: np.ndarray) -> np.ndarray:
        """Draft forwards each step pays: `drafted` the steps each asks for (inf: all), capped at the
        setting's N = `tree_depth` (policies/base.py DRAFTING_RULE); 0 where it asks for none."""
        asked = np.asarray(drafted, dtype=np.float64).reshape(-1)
        return np.where(asked > 0, np.minimum(asked, float(self.tree_depth)), 0.0)

    def draft_times(self, drafted: np.ndarray) -> np.ndarray:
        """Seconds of each step's draft side, at its `draft_levels`."""
        asked = np.asarray(drafted, dtype=np.float64).reshape(-1) > 0
        d = self.draft_levels(drafted)
        out = np.zeros(len(d))
        for x in np.unique(d[asked]):  # all N: the setting's own draft_time (a profile's fixed time too)
            out[asked & (d == x)] = self.draft_time(True, None if x == self.tree_depth else float(x))
        return out

    def draft_time(self, speculative: bool, steps: float | None = None) -> float:
        return self.checked("draft time", self._draft_time(speculative, steps))

    def _combine(self, memory: np.ndarray | float, compute: np.ndarray) -> np.ndarray:
        return np.maximum(memory, compute) if self.terms.overlap == "max" else memory + compute

    def device_layer_times(self, union: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return self.checked("expert-group layer times", self._device_layer_times(union, tokens))

    def _device_layer_times(self, union: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Seconds each expert group spends on each MoE layer: (steps, layers, groups).

        `union` is (steps, layers, groups) distinct experts each group reads; `tokens` (steps,)
        tokens verified. Routed FLOPs (2 n k P_e) are shared evenly by the devices.
        """
        p = self.placement
        eb = float(self.model.expert_bytes) * p.expert_fraction
        memory = union * eb / self.bw
        if self.experts_only:
            return memory
        m = self.model
        n = tokens.astype(np.float64)[:, None, None]
        flops = 2.0 * n * m.top_k * m.expert_params / p.devices
        eff = np.ones_like(memory)
        if self.terms.gemm_tile_rows > 0:
            per_expert = n * m.top_k / np.maximum(union.sum(axis=-1, keepdims=True), 1)
            eff = np.minimum(1.0, per_expert / self.terms.gemm_tile_rows)
        return self._combine(memory, flops / (self.peak * np.maximum(eff, 1e-9)))  # 0 tokens: 0 FLOPs, 0 s

    def _collective(self, count: int, tokens: np.ndarray, one_way_bytes: np.ndarray) -> np.ndarray:
        return count * (self.terms.collective_latency_s + self.device.link_latency_s + one_way_bytes / self.device.link_bw)

    def collective_time(self, tokens: np.ndarray, moe: bool = True) -> np.ndarray:
        """Seconds of one layer's collectives: all-reduces (ring: 2 (D-1)/D of n h a bytes) and
        all-to-alls (dispatch or combine: (G-1)/G of n k h a bytes); 0 on one device."""
        p, m = self.placement, self.model
        if self.experts_only or p.devices == 1:
            return np.zeros(len(tokens))
        n = tokens.astype(np.float64)
        d, g = p.devices, p.groups
        ar = self._collective(p.allreduces(moe), n, 2 * (d - 1) / d * n * m.hidden_size * ACT_BYTES)
        a2a = self._collective(p.alltoalls(moe), n, (g - 1) / g * n * m.top_k * m.hidden_size * ACT_BYTES)
        return ar + a2a

    def copy_time(self, misses: np.ndarray) -> np.ndarray:
        """Seconds to copy missed experts host -> device over PCIe."""
        return self.checked("copy time", misses * float(self.model.expert_bytes) / self.device.pcie_bw)

    def layer_times(self, union: np.ndarray, tokens: np.ndarray, misses: np.ndarray | None = None) -> np.ndarray:
        """Seconds per (step, MoE layer), run back to back: the slowest group, the layer's
        collectives, and (offload) the copy of the layer's misses before it.

        `union` is (steps, layers) distinct experts read, or (steps, layers, groups);
        `misses` (steps, layers) experts copied over PCIe under offload. Priced a block of steps
        at a time, so the (steps, layers, groups) float temporaries stay bounded (a whole trace's
        steps under ep:8 made several of them, each larger than the routing); every entry is
        priced elementwise, so blocks change no float.
        """
        n = len(tokens)
        block = _block(int(np.prod(union.shape[1:])))
        if n <= block:
            return self._layer_times(union, tokens, misses)
        out = np.empty((n, union.shape[1]))
        for a in range(0, n, block):
            b = min(a + block, n)
            out[a:b] = self._layer_times(union[a:b], tokens[a:b], None if misses is None else misses[a:b])
        return out

    def moe_seconds(self, bits: np.ndarray, tokens: np.ndarray, misses: np.ndarray | None = None) -> np.ndarray:
        """(steps,) seconds in the MoE layers of steps whose expert unions are `bits` (steps, layers,
        words): each group's distinct experts counted and priced a block of steps at a time, as
        `layer_times` prices, so the (steps, layers, groups) counts never exist whole either (under
        ep:8 the oracle's counts of every chain prefix took twice the memory of its bitsets)."""
        n = len(bits)
        block = _block(bits.shape[1] * self.placement.groups)
        out = np.empty(n)
        for a in range(0, n, block):
            b = min(a + block, n)
            union = self.placement.union_per_group(bits[a:b], self.model.num_experts)
            out[a:b] = self._layer_times(union, tokens[a:b], None if misses is None else misses[a:b]).sum(axis=1)
        return out

    def _layer_times(self, union: np.ndarray, tokens: np.ndarray, misses: np.ndarray | None) -> np.ndarray:
        per_group = union if union.ndim == 3 else union[..., None]
        t = self._device_layer_times(per_group, tokens).max(axis=-1) + self.collective_time(tokens)[:, None]
        if self.host_mask is not None:  # the host's layers (cpu-moe[:N], cpu): one group, priced by host_cost
            mask = self.host_mask
            t[:, mask] = host_layer_times(self, per_group[:, mask, 0], tokens)
        if misses is not None:
            t = t + misses * float(self.model.expert_bytes) / self.device.pcie_bw
        return self.checked("layer times", t)

    def layer_table(self, union: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """F(u, n) of one MoE layer for a selection pricer (marginal.py): `union` (tokens, u values, groups).
        With some layers on the host and the rest on the device (cpu-moe:N), the layers' mean of the two."""
        device = self.device_layer_times(union, tokens).max(axis=-1) + self.collective_time(tokens)[:, None]
        if self.host_mask is None:
            return device
        share = float(self.host_mask.mean())
        return share * host_layer_times(self, union[..., 0], tokens) + (1 - share) * device

    def dense_flops(self, tokens: np.ndarray) -> np.ndarray:
        """FLOPs of the dense GEMMs per step (all devices): 2 n P_dense; with `act_quant` the W8A8 GEMMs (every dense
        weight but the BF16 LM head) run on tensor cores in tiles of `gemm_tile_rows` rows whatever n, as the grouped
        expert GEMMs do (SGLang's tuned block-FP8 configs use BLOCK_SIZE_M 64 even at M = 1, e.g. configs/N=24576,
        K=7168,device_name=NVIDIA_H20,dtype=fp8_w8a8,block_shape=[128, 128].json): 2 n P_q / eta(n). Invisible where
        the compute peak covers the padded tile under the bytes (H100/H200 FP8); it binds on compute-poor parts (H20)."""
        m = self.model
        flops = 2.0 * tokens * m.dense_params
        rows = self.terms.gemm_tile_rows
        if not m.act_quant or rows <= 0:
            return flops
        quantised = max(m.dense_bytes - m.vocab_size * m.hidden_size * 2, 0) / m.bytes_per_param
        return flops + 2.0 * tokens * quantised * (1.0 / np.minimum(1.0, tokens / rows) - 1.0)

    def other_times(self, tokens: np.ndarray, context: np.ndarray, speculative: bool) -> np.ndarray:
        """Seconds per step outside the routed experts: fixed terms, dense weights, attention (KV),
        the dense layers' collectives, and the draft."""
        if self.experts_only:
            return np.zeros(len(tokens))
        return self.checked("step times outside the experts", self._other_times(tokens, context, speculative))

    def _other_times(self, tokens: np.ndarray, context: np.ndarray, speculative: bool) -> np.ndarray:
        m, p = self.model, self.placement
        share = p.dense_share
        tok = tokens.astype(np.float64)
        dense = self._combine(m.dense_bytes / share / self.bw, self.dense_flops(tok) / share / self.peak)
        kv = (context.astype(np.float64) + tok) * m.kv_bytes_per_token / share / self.bw
        dense_layers = (m.num_layers - m.num_moe_layers) * self.collective_time(tokens, moe=False)
        return dense + kv + dense_layers + self.step_overhead + self._draft_time(speculative)

    def step_times(
        self,
        union: np.ndarray,
        tokens: np.ndarray,
        context: np.ndarray,
        speculative: bool,
        misses: np.ndarray | None = None,
    ) -> np.ndarray:
        """Seconds per step: the MoE layers plus everything else."""
        return self.layer_times(union, tokens, misses).sum(axis=1) + self.other_times(tokens, context, speculative)

    def checked(self, what: str, t: Any) -> Any:
        """The boundary of the cost model: no time leaves it non-finite or negative. Such a value is an
        InternalError naming the quantity and every input it was priced from, never a printed number."""
        a = np.asarray(t, dtype=np.float64)
        if bool(np.all((a >= 0) & (a < np.inf))):
            return t
        bad = a[~((a >= 0) & (a < np.inf))].flat[0]
        m, d = self.model, self.device
        terms = {k: v for k, v in asdict(self.terms).items() if isinstance(v, (int, float)) and v}
        raise InternalError(
            f"the cost model priced {what} of {float(bad)!r} s (times must be finite and >= 0) from: model {m.name} "
            f"(expert_bytes {m.expert_bytes!r}, dense_bytes {m.dense_bytes!r}, kv_bytes_per_token {m.kv_bytes_per_token!r}, "
            f"bytes_per_param {m.bytes_per_param!r}, layers {m.num_layers}), device {d.name} (hbm_bw {d.hbm_bw!r}, "
            f"peak {self.peak!r}, link_bw {d.link_bw!r}, pcie_bw {d.pcie_bw!r}), placement {self.placement}, "
            f"tree depth {self.tree_depth}, draft {self.draft}, terms {terms}")

    def applied(self) -> dict[str, object]:
        """The values this model prices with once CLI values, profiles and defaults are resolved
        (Terms): what every command prints as used (never null for an applied default)."""
        if self.experts_only:  # routed-expert bytes at the raw bandwidth, nothing else
            return {"bw_efficiency": 1.0, "step_overhead_s": 0.0, "draft_time_s": 0.0}
        used: dict[str, object] = {k: v for k, v in asdict(self.terms).items() if k != "draft_time_s"}
        used["step_overhead_s"] = self.step_overhead  # step_fixed_s + K tau_k + L K_x (extra_kernel_s + graph_node_s)
        used["kernels_per_step"] = self.kernels
        if self.device.graph_node_s:  # a platform's own cost per kernel node (devices.py), named where it applies
            used["graph_node_s"] = self.device.graph_node_s
        used["draft_time_s"] = self.draft_time(speculative=True)
        if self.host_mask is not None and self.host is not None:  # the host's terms, where it computes experts
            h, e = self.host, self.engine
            used["host"] = {"name": h.name, "layers": int(self.host_mask.sum()), "bandwidth": h.bandwidth,
                            "read_efficiency": h.read_efficiency * e.host_read_efficiency, "gemv_flops": h.gemv_flops,
                            "gemm_flops": h.gemm_flops * e.host_gemm_efficiency, "gemm_rows": h.gemm_rows,
                            "overlap": h.overlap, "layer_s": e.host_layer_s}
        if self.config.dtype is not None:
            used["dtype"] = self.config.dtype
        return used

    def describe(self) -> dict[str, object]:
        """Every value a priced step used, with the device and placement (replay's footer / --json)."""
        return {
            **self.device.to_dict(),
            "placement": str(self.placement),
            "cost_mode": self.config.mode,
            "terms": asdict(self.terms),
            "kernels_per_step": self.kernels,
            "achieved_bw": self.bw,
            "achieved_peak_flops": self.peak,
            "step_overhead_s": self.step_overhead,
            "draft": asdict(self.draft) if self.draft else None,
            "not_modelled": list(NOT_MODELLED),
        }
