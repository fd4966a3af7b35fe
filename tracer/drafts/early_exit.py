"""`early-exit:N`: the target's own first N layers, then its final norm and LM head (self-speculative
decoding, Zhang et al. 2024; LayerSkip, Elhoushi et al. 2024). ``early-exit:auto`` takes a quarter
of the layers. The draft shares every weight with the target: a shallow view, no copy."""

from __future__ import annotations

import copy
import re
from typing import Any

import torch

from tracer.drafts.cost import describe
from tracer.drafts.model import kv_bytes, moe_of
from tracer.errors import TracerError
from tracer.runner import CachedLM
from tracer.shape import nbytes, nparams

_ARG = re.compile(r"^(auto|\d+)$")


def layers_of(arg: str, num_layers: int) -> int:
    """N of ``early-exit:N`` (``auto``: a quarter of the layers), checked against the target."""
    m = _ARG.match(arg.strip())
    if m is None:
        raise TracerError(f"--draft early-exit:{arg}: expected early-exit:N with N a number of layers, or early-exit:auto")
    n = max(1, num_layers // 4) if m.group(1) == "auto" else int(m.group(1))
    if not 1 <= n < num_layers:
        raise TracerError(f"--draft early-exit:{arg}: N must be in [1, {num_layers - 1}] (the target has {num_layers} layers)")
    return n


def view(model: Any, n_layers: int) -> Any:
    """The target cut after its first `n_layers` decoder layers (then its final norm and LM head).

    A shallow view: it shares every parameter with `model` (no copy); only the layer list differs.
    """
    inner = copy.copy(model.model)
    inner._modules = dict(model.model._modules)
    inner._modules["layers"] = torch.nn.ModuleList(list(model.model.layers)[:n_layers])
    out = copy.copy(model)
    out._modules = dict(model._modules)
    out._modules["model"] = inner
    return out


def load(arg: str, target: CachedLM, *, source: Any, **_: Any) -> tuple[CachedLM, dict[str, Any]]:
    model = target.model
    n = layers_of(arg, int(model.config.num_hidden_layers))
    dmodel = view(model, n)
    info = describe(
        name=f"{source.name}:early-exit:{n}", kind="early-exit", source="the target's first layers",
        params=nparams(dmodel), read_bytes=nbytes(dmodel), shares=["embedding", f"layers 0..{n - 1}", "final norm", "lm_head"],
        moe=moe_of(model, list(range(n))),
        shape={"layers": n, "hidden_size": int(model.config.hidden_size), "input": "tokens",
               "kv_bytes_per_token": kv_bytes(model, n)},
    )
    info["layers"] = n
    return CachedLM(dmodel), info
