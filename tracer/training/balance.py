"""Expert load-balancing losses of the target: Switch-style, per layer, over a batch or a sequence.

Both equal 1.0 at perfect balance and E (the number of experts) when every token of the unit
goes to one expert.
"""

from __future__ import annotations

import torch


def per_layer_balance_loss(router_logits, top_k: int) -> torch.Tensor:
    """Switch-transformer load-balancing loss, computed for each MoE layer and averaged.

    (transformers' built-in version pools the counts of all layers, which can hide a layer whose
    routing has collapsed; this one balances each layer on its own.)  1.0 at perfect balance.
    """
    losses = []
    for lg in router_logits:
        probs = torch.softmax(lg.float(), dim=-1)
        num_experts = probs.shape[-1]
        idx = torch.topk(probs, top_k, dim=-1).indices
        frac = torch.zeros(num_experts).scatter_add_(0, idx.reshape(-1), torch.ones(idx.numel()))
        frac = frac / idx.shape[0]  # fraction of tokens routed to each expert (sums to top_k)
        losses.append(num_experts * torch.sum(frac * probs.mean(0)) / top_k)
    return torch.stack(losses).mean()


def sequence_balance_loss(router_logits, batch: int, top_k: int) -> torch.Tensor:
    """Switch loss over each sequence on its own, averaged over sequences and layers (1.0 = even).

    Per layer and sequence: E * sum_i f_i * P_i / k, with f_i the fraction of the sequence's
    tokens routed to expert i (sums to k) and P_i its mean router probability.
    """
    losses = []
    for lg in router_logits:
        probs = torch.softmax(lg.float(), dim=-1).reshape(batch, -1, lg.shape[-1])  # (B, T, E)
        num_experts, tokens = probs.shape[-1], probs.shape[1]
        idx = torch.topk(probs, top_k, dim=-1).indices.reshape(batch, -1)
        frac = torch.zeros(batch, num_experts).scatter_add_(1, idx, torch.ones(idx.shape)) / tokens
        losses.append((num_experts * (frac * probs.mean(1)).sum(-1) / top_k).mean())
    return torch.stack(losses).mean()
