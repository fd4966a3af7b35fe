"""What every placement answers, so nothing else compares a placement's name.

A placement says where the weights live and what a step's MoE layer costs in *device-local*
terms; ecosim/cost/ turns those into seconds:

- `groups`: expert groups (devices that hold different experts); `group_masks` says which experts
  each group holds, `union_per_group` counts the distinct experts of a step's union that each group
  reads, from the union bitsets;
- `expert_fraction`: the fraction of one expert's bytes a device of a group reads (1/N under tp);
- `devices`: devices in use; `dense_share`: devices the dense weights and the KV cache are split
  over (attention is tensor parallel over every device in the sharded placements);
- `allreduces` / `alltoalls`: collectives per transformer layer (MoE or dense), each paying a
  latency plus its bytes over the link (ecosim/cost/);
- `resident_experts`: experts per MoE layer a device holds, for the capacity check;
- `cache`: the state a step leaves behind (offload), or None: `stateful` follows from it;
- `host_layers`: which MoE layers' routed experts the host's CPU reads and computes (cpu-moe[:N], cpu),
  None where none does; `on_host`: the whole model runs on the host (cpu), the host standing in for the
  device (catalog/hosts.py).

A new placement is one module defining a subclass and one line in registry.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ecosim import bitsets
from ecosim.cache import ExpertCache
from ecosim.catalog.devices import Device
from ecosim.catalog.models import ModelShape
from ecosim.errors import EcoSimError

if TYPE_CHECKING:
    from ecosim.catalog.hosts import Host


@dataclass(frozen=True)
class Placement(ABC):
    """Base of every placement (frozen: placements are hashed into priced-row keys)."""

    syntax: ClassVar[str] = ""  # e.g. "tp:N", shown in the usage line
    summary: ClassVar[str] = ""  # one phrase for --help

    @classmethod
    @abstractmethod
    def parse(cls, text: str) -> Placement | None:
        """The placement `text` names (lower case, stripped), or None when it is not this kind."""

    @abstractmethod
    def __str__(self) -> str: ...

    @property
    def devices(self) -> int:
        return 1

    @property
    def groups(self) -> int:
        return 1

    @property
    def expert_fraction(self) -> float:
        return 1.0

    @property
    def dense_share(self) -> int:
        return 1

    def allreduces(self, moe: bool) -> int:
        """All-reduces per transformer layer (moe: whether the layer is an MoE layer)."""
        return 0

    def alltoalls(self, moe: bool) -> int:
        return 0

    def resident_experts(self, model: ModelShape) -> float:
        """Routed experts per MoE layer held on the fullest device (a fraction under tp)."""
        return float(model.num_experts)

    def cache(self, model: ModelShape) -> ExpertCache | None:
        """A fresh cache when a step's cost depends on earlier steps, else None."""
        return None

    @property
    def stateful(self) -> bool:
        return False

    def host_layers(self, model: ModelShape) -> np.ndarray | None:
        """(MoE layers,) bool: the layers whose routed experts live in host RAM and run on the CPU; None: none."""
        return None

    @property
    def on_host(self) -> bool:
        """The whole model on the host's CPU (no device)."""
        return False

    def group_masks(self, num_experts: int) -> np.ndarray:
        """(groups, words) bitsets of the experts each group holds: contiguous blocks, the first
        E mod G groups one larger (bitsets.device_masks); one group holds every expert."""
        return bitsets.device_masks(num_experts, self.groups)

    def union_per_group(self, bits: np.ndarray, num_experts: int) -> np.ndarray:
        """(..., words) union bitsets -> (..., groups) distinct experts each group reads."""
        if self.groups == 1:
            return bitsets.count(bits)[..., None]
        return bitsets.count_per_device(bits, self.group_masks(num_experts))

    # ------------------------------------------------------------------------------ capacity

    def bytes_per_device(self, model: ModelShape, context_tokens: int) -> tuple[float, float]:
        """(weights, KV) bytes on the fullest device for one request of `context_tokens`."""
        weights = self.resident_experts(model) * model.num_moe_layers * model.expert_bytes + model.dense_bytes / self.dense_share
        return weights, context_tokens * model.kv_bytes_per_token / self.dense_share

    def check_model(self, model: ModelShape) -> None:
        """Refuse a placement the model's shape makes meaningless, or warn where it is legal but wasteful
        (each kind says its own; most have nothing to say)."""

    def check(self, model: ModelShape, device: Device, context_tokens: int, memory_fraction: float,
              host: Host | None = None) -> None:
        """Refuse a configuration whose weights and KV do not fit a device, saying what would (`host`: the
        host machine, for the placements that hold weights in its RAM)."""
        weights, kv = self.bytes_per_device(model, context_tokens)
        usable = device.hbm_bytes * memory_fraction
        if device.hbm_bytes <= 0 or weights + kv <= usable:
            return
        raise EcoSimError(
            f"{model.name} under {self} needs {(weights + kv) / 1e9:.1f} GB per device (weights {weights / 1e9:.1f} GB "
            f"+ KV {kv / 1e9:.2f} GB for {context_tokens} tokens) but {device.name} holds {usable / 1e9:.1f} GB "
            f"({memory_fraction:.0%} of {device.hbm_bytes / 1e9:.0f} GB); {what_fits(model, device, context_tokens, memory_fraction)}"
        )


def what_fits(model: ModelShape, device: Device, context_tokens: int, memory_fraction: float) -> str:
    """The smallest ep:N and tp:N that fit, and the largest offload cache, as one phrase."""
    usable = device.hbm_bytes * memory_fraction
    kv = context_tokens * model.kv_bytes_per_token
    options = []
    for n in (2, 4, 8, 16, 32, 64):
        if -(-model.num_experts // n) * model.num_moe_layers * model.expert_bytes + (model.dense_bytes + kv) / n <= usable:
            options.append(f"ep:{n} or tp:{n}")
            break
    rest = usable - model.dense_bytes - kv
    cap = int(rest // (model.num_moe_layers * model.expert_bytes)) if rest > 0 else 0
    cap = min(cap, model.num_experts - 1)
    if cap >= model.top_k:
        options.append(f"offload:{cap}")
    return ("would fit: " + " or ".join(options)) if options else "no placement of up to 64 devices fits"
