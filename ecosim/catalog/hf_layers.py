"""Attention of model types whose decoder layers are not all alike, read from a Hugging Face config.json.

The catalogue's arithmetic (shape.Arch) prices one attention kind repeated over every layer. This year's MoE
families mix kinds, and a step's bytes depend on the mix:

- **Hybrid linear attention** (Qwen3-Next, Qwen3.5-MoE): `layer_types` names each layer `linear_attention`
  (a Gated DeltaNet: qkvz, ba, a depthwise causal conv and an output projection; it caches no keys, it keeps a
  recurrent state of num_v_heads x key_head_dim x value_head_dim plus the conv's last kernel - 1 inputs) or
  `full_attention` (GQA whose query projection also emits an output gate: 2 x heads x head_dim wide). A decode
  step reads and writes every linear layer's state once, whatever the context: bytes that do not grow with the
  context and that the cost model charges like weights (`Arch.state_elems`).
- **Sliding and full layers with their own head sizes** (Gemma-4): `sliding_attention` layers use `head_dim`
  and `num_key_value_heads`; `full_attention` layers `global_head_dim` (512 by default) and, with
  `attention_k_eq_v`, `num_global_key_value_heads` and no value projection (keys double as values); layers in
  the last `num_kv_shared_layers` reuse an earlier layer's keys and values (no k/v projection, nothing cached).

Each returns (attention parameters over all layers, elements one token caches over all layers, recurrent-state
elements read and written per step), as transformers 5.24's modeling code builds the layers. Approximated: norms,
the DeltaNet's A_log / dt_bias and a sliding layer's bounded cache (every layer's cache counts the whole context,
as in the catalogue).
"""

from __future__ import annotations

from typing import Any, Callable

from ecosim.catalog.shape import gqa_params
from ecosim.errors import EcoSimError

Layers = tuple[int, int, int]  # (attention params, cached elements per token, state elements), all layers


def _layer_types(c: dict[str, Any], layers: int, default: Callable[[int], str], kinds: tuple[str, ...]) -> list[str]:
    """The config's `layer_types` (each one of `kinds`), or transformers' default pattern where it is absent."""
    types = c.get("layer_types")
    if types is None:
        return [default(i) for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not all(t in kinds for t in types):
        raise EcoSimError(f"config.json: layer_types must list one of {', '.join(kinds)} for each of the {layers} layers")
    return types


def _pos(c: dict[str, Any], key: str, default: int) -> int:
    v = c.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise EcoSimError(f"config.json: {key} must be a positive integer, not {v!r}")
    return v


def gated_deltanet(c: dict[str, Any], hidden: int, layers: int) -> Layers:
    """Qwen3-Next / Qwen3.5-MoE: linear layers every layer but each `full_attention_interval`-th (4)."""
    interval = _pos(c, "full_attention_interval", 4)
    types = _layer_types(c, layers, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention",
                         ("linear_attention", "full_attention"))
    heads, kv_heads = _pos(c, "num_attention_heads", 16), _pos(c, "num_key_value_heads", 2)
    head_dim = _pos(c, "head_dim", 256)
    full = gqa_params(hidden, heads, kv_heads, head_dim) + hidden * heads * head_dim  # + the output gate's half of q
    nk, nv = _pos(c, "linear_num_key_heads", 16), _pos(c, "linear_num_value_heads", 32)
    dk, dv, kernel = _pos(c, "linear_key_head_dim", 128), _pos(c, "linear_value_head_dim", 128), _pos(c, "linear_conv_kernel_dim", 4)
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    linear = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * nv + conv_dim * kernel + value_dim * hidden
    n_full = types.count("full_attention")
    n_linear = layers - n_full
    state = n_linear * (nv * dk * dv + conv_dim * (kernel - 1))
    return n_full * full + n_linear * linear, n_full * 2 * kv_heads * head_dim, state


def sliding_and_full(c: dict[str, Any], hidden: int, layers: int) -> Layers:
    """Gemma-4: five sliding layers to one full layer by default, the last layer full."""
    types = _layer_types(c, layers, lambda i: "full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention",
                         ("sliding_attention", "full_attention"))
    heads = _pos(c, "num_attention_heads", 8)
    k_eq_v = bool(c.get("attention_k_eq_v", False))
    overrides = c.get("per_layer_config") or {}
    if not isinstance(overrides, dict):
        raise EcoSimError("config.json: per_layer_config must be an object keyed by layer index")
    shared = c.get("num_kv_shared_layers") or 0
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared < layers:
        raise EcoSimError(f"config.json: num_kv_shared_layers must lie in [0, {layers}), not {shared!r}")
    params = cached = 0
    for i, kind in enumerate(types):
        own = overrides.get(str(i), overrides.get(i)) or {}
        if kind == "full_attention":
            hd = _pos(own, "head_dim", _pos(c, "global_head_dim", 512))
            kvh = _pos(own, "num_key_value_heads", _pos(c, "num_global_key_value_heads", _pos(c, "num_key_value_heads", 4))
                       if k_eq_v else _pos(c, "num_key_value_heads", 4))
            alt = k_eq_v
        else:
            hd = _pos(own, "head_dim", _pos(c, "head_dim", 256))
            kvh = _pos(own, "num_key_value_heads", _pos(c, "num_key_value_heads", 4))
            alt = False
        params += 2 * hidden * heads * hd  # q and o
        if i < layers - shared:  # a layer with its own keys and values
            params += hidden * kvh * hd * (1 if alt else 2)
            cached += kvh * hd * (1 if alt else 2)
    return params, cached, 0


# model type -> the reader of its layers; the types not listed here have one attention kind (hf_config._attention)
MIXED: dict[str, Callable[[dict[str, Any], int, int], Layers]] = {
    "qwen3_next": gated_deltanet,
    "qwen3_5_moe": gated_deltanet,
    "gemma4": sliding_and_full,
}
