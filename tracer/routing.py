"""Router capture: forward hooks on each MoE layer's router, exactly what the model chose.

transformers 5 routers (`model.layers.{i}.mlp.gate` for Qwen3-MoE, OLMoE, Mixtral and DeepSeek-V3;
`model.layers.{i}.mlp.router` for GPT-OSS) return ``(router_logits, topk_weights, topk_indices)``,
the weights and indices the experts are then run with. The hook keeps those two tensors on their
device (no host sync per layer); `collect` moves every layer to the host once, at the end of a step.
Each token's k experts are ordered by descending gate weight (DeepSeek-V3's router returns them
unsorted: sigmoid scores plus a correction bias, group-limited, ``topk(sorted=False)``). Dense
layers (DeepSeek-V3's first ``first_k_dense_replace``) have no router and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from tracer.errors import TracerError

ROUTER_ATTRS = ("router", "gate")  # gpt_oss; qwen3_moe, olmoe, mixtral, deepseek_v3


def decoder_layers(model: Any) -> Any:
    """The decoder's layer list of a `*ForCausalLM`."""
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise TracerError(f"{type(model).__name__}: no `model.layers`; not a decoder-only transformers model")
    return layers


def find_routers(model: Any) -> list[tuple[int, torch.nn.Module]]:
    """(layer index, router module) of every MoE layer, in layer order."""
    found = []
    for i, layer in enumerate(decoder_layers(model)):
        mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        for attr in ROUTER_ATTRS:
            r = getattr(mlp, attr, None)
            # a dense MLP has `gate_proj`, never `gate`; an nn.Linear gate is a pre-5.0 router
            if isinstance(r, torch.nn.Module) and not isinstance(r, torch.nn.Linear) and hasattr(r, "top_k"):
                found.append((i, r))
                break
    return found


class RouterCapture:
    """Hooks on every router; while `active`, each forward's routing is kept on the device."""

    def __init__(self, model: Any):
        self.routers = find_routers(model)
        if not self.routers:
            raise TracerError(f"{type(model).__name__}: no MoE routers found (expected `mlp.gate` or `mlp.router` modules)")
        self.moe_layers = [i for i, _ in self.routers]
        self.top_k = int(self.routers[0][1].top_k)
        self.active = False
        self._seen: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {i: [] for i in self.moe_layers}
        self._handles = [r.register_forward_hook(self._hook(i)) for i, r in self.routers]

    def _hook(self, layer: int):
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not self.active:
                return
            if not (isinstance(output, tuple) and len(output) == 3):
                raise TracerError(
                    f"router of layer {layer} ({type(module).__name__}) does not return "
                    "(logits, weights, indices); this tracer needs transformers 5 routers"
                )
            _, weights, idx = output
            weights, order = weights.detach().sort(dim=-1, descending=True, stable=True)
            self._seen[layer].append((idx.detach().gather(-1, order), weights))

        return hook

    @contextmanager
    def capture(self) -> Iterator[RouterCapture]:
        """Record the routing of the forwards run inside the block (cleared on entry)."""
        for v in self._seen.values():
            v.clear()
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def collect(self) -> tuple[np.ndarray, np.ndarray]:
        """(experts int16, gates float32), each (tokens, moe_layers, top_k); one host transfer; clears."""
        per_layer = []
        for i in self.moe_layers:
            if not self._seen[i]:
                raise TracerError(f"router of layer {i} did not run during the captured forward")
            per_layer.append([torch.cat(t) for t in zip(*self._seen[i])])
        dev = per_layer[0][0].device
        idx = torch.stack([p[0].to(dev, non_blocking=True) for p in per_layer], dim=1)
        w = torch.stack([p[1].to(dev, non_blocking=True).float() for p in per_layer], dim=1)
        for v in self._seen.values():
            v.clear()
        return idx.to(torch.int16).cpu().numpy(), w.cpu().numpy()

    def remove(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []
