"""The routing captured by the router hooks equals each family's own routing on the same input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tracer.tiny import FAMILIES


def expected_routing(family: str, cfg, logits: torch.Tensor, bias: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """Each family's routing restated from its router logits: (experts, weights), descending weight."""
    logits = logits.float()
    k = cfg.num_experts_per_tok
    if family == "gpt_oss":  # top-k of the logits, softmax over the k
        top = logits.topk(k, dim=-1)
        w, idx = torch.softmax(top.values, dim=-1), top.indices
    elif family == "deepseek_v3":  # sigmoid + correction bias, group-limited top-k, renormalised, scaled
        scores = logits.sigmoid()
        choice = scores + bias
        groups = choice.view(-1, cfg.n_group, cfg.n_routed_experts // cfg.n_group)
        best = groups.topk(2, dim=-1).values.sum(-1).topk(cfg.topk_group, dim=-1).indices
        keep = torch.zeros_like(groups[..., 0], dtype=torch.bool).scatter_(1, best, True)
        choice = choice.masked_fill(~keep.repeat_interleave(groups.shape[-1], dim=1), float("-inf"))
        idx = choice.topk(k, dim=-1).indices
        w = scores.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * cfg.routed_scaling_factor
    else:  # softmax top-k; Mixtral always renormalises, Qwen3-MoE / OLMoE when norm_topk_prob
        top = torch.softmax(logits, dim=-1).topk(k, dim=-1)
        w, idx = top.values, top.indices
        if family == "mixtral" or cfg.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
    w, order = w.sort(dim=-1, descending=True, stable=True)
    return idx.gather(-1, order).numpy(), w.numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_hooks_capture_the_models_own_routing(family, pairs):
    pair = pairs[family]
    model, cap = pair.target.model, pair.capture
    ids = torch.randint(3, 259, (1, 24), generator=torch.Generator().manual_seed(7))
    with torch.inference_mode(), cap.capture():
        out = model(ids, output_router_logits=True)
    experts, gates = cap.collect()  # (tokens, moe_layers, k)
    assert experts.shape == (24, len(cap.moe_layers), model.config.num_experts_per_tok)
    assert np.all(np.diff(gates, axis=-1) <= 0), "each token's experts are in descending gate weight"
    assert len(out.router_logits) == len(cap.moe_layers)
    for j, (layer, logits) in enumerate(zip(cap.moe_layers, out.router_logits)):
        gate = model.model.layers[layer].mlp
        bias = gate.gate.e_score_correction_bias.float() if family == "deepseek_v3" else None
        want_e, want_w = expected_routing(family, model.config, logits, bias)
        np.testing.assert_array_equal(experts[:, j], want_e, err_msg=f"{family} layer {layer}")
        np.testing.assert_allclose(gates[:, j], want_w, rtol=1e-5, atol=1e-6)


def test_deepseek_matches_its_own_router_and_skips_dense_layers(pairs):
    """DeepSeek-V3: top-k of router_logits is *not* what it chose; its own gate forward is."""
    pair = pairs["deepseek_v3"]
    model, cap = pair.target.model, pair.capture
    cfg = model.config
    assert cap.moe_layers == list(range(cfg.first_k_dense_replace, cfg.num_hidden_layers))
    inputs: dict[int, torch.Tensor] = {}
    handles = [
        model.model.layers[i].mlp.gate.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, a[0].detach()))
        for i in cap.moe_layers
    ]
    try:
        ids = torch.randint(3, 259, (1, 32), generator=torch.Generator().manual_seed(3))
        with torch.inference_mode(), cap.capture():
            out = model(ids, output_router_logits=True)
        experts, gates = cap.collect()
    finally:
        for h in handles:
            h.remove()
    naive_differs = False
    for j, layer in enumerate(cap.moe_layers):
        with torch.inference_mode():
            _, w, idx = model.model.layers[layer].mlp.gate(inputs[layer])  # the model's own routing function
        w, order = w.sort(dim=-1, descending=True, stable=True)
        np.testing.assert_array_equal(experts[:, j], idx.gather(-1, order).numpy())
        np.testing.assert_allclose(gates[:, j], w.numpy(), rtol=1e-6)
        naive = out.router_logits[j].topk(cfg.num_experts_per_tok, dim=-1).indices.sort(-1).values.numpy()
        naive_differs |= not np.array_equal(np.sort(experts[:, j], axis=-1), naive)
    assert naive_differs, "the tiny DeepSeek model should exercise the bias and the group limit"


def test_hooks_are_idle_outside_capture_and_keep_tensors_on_device(pairs):
    pair = pairs["qwen3_moe"]
    model, cap = pair.target.model, pair.capture
    assert all(not v for v in cap._seen.values())
    with torch.inference_mode():
        model(torch.tensor([[1, 5, 6]]))
    assert all(not v for v in cap._seen.values())
    with torch.inference_mode(), cap.capture():
        model(torch.tensor([[1, 5, 6]]))
    held = [t for v in cap._seen.values() for pair_ in v for t in pair_]
    assert held and all(isinstance(t, torch.Tensor) and t.device == pair.target.device for t in held)
