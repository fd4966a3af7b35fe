"""Where the routed experts live: `hbm`, `ep:N` or `offload:CAP[:lru|lfu]`.

- `hbm`: every expert resident in one device's memory; a layer reads its union at HBM bandwidth.
- `ep:N`: expert parallelism over N devices, experts in contiguous blocks (device d holds
  experts [d*E/N, (d+1)*E/N)); each device reads its own part of the union, the layer waits for
  the slowest device, and activations cross the link twice (dispatch and combine). Dense weights
  (attention, shared experts, LM head) are split evenly over the N devices (tensor parallel).
- `offload:CAP`: one device whose HBM caches CAP experts per MoE layer (LRU or LFU, the state
  carried across steps along the policy's own trajectory); misses are copied over PCIe first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ecosim.errors import EcoSimError


@dataclass(frozen=True)
class Placement:
    kind: Literal["hbm", "ep", "offload"] = "hbm"
    devices: int = 1
    capacity: int = 0  # experts cached per MoE layer (offload only)
    eviction: Literal["lru", "lfu"] = "lru"

    def __str__(self) -> str:
        if self.kind == "ep":
            return f"ep:{self.devices}"
        if self.kind == "offload":
            return f"offload:{self.capacity}:{self.eviction}"
        return "hbm"

    @property
    def stateful(self) -> bool:
        """True when a step's cost depends on earlier steps (the offload cache)."""
        return self.kind == "offload"


def parse_placement(text: str) -> Placement:
    """`hbm`, `ep:8`, `offload:64`, `offload:64:lfu`; anything else is a one-line error."""
    parts = text.strip().lower().split(":")
    usage = f"placement {text!r} not understood; expected hbm, ep:N (N >= 1) or offload:CAP[:lru|lfu]"
    try:
        if parts == ["hbm"]:
            return Placement()
        if parts[0] == "ep" and len(parts) == 2 and int(parts[1]) >= 1:
            return Placement("ep", devices=int(parts[1]))
        if parts[0] == "offload" and len(parts) in (2, 3) and int(parts[1]) >= 1:
            eviction = parts[2] if len(parts) == 3 else "lru"
            if eviction in ("lru", "lfu"):
                return Placement("offload", capacity=int(parts[1]), eviction=eviction)  # type: ignore[arg-type]
    except ValueError:
        pass
    raise EcoSimError(usage)
