"""Optimiser and learning-rate schedule of both training loops, with the constants the card cites.

AdamW with decoupled weight decay on matrices only (not norms or biases), linear warm-up then
cosine decay to `LR_FLOOR` of the peak, gradients clipped to `CLIP_NORM`.
"""

from __future__ import annotations

import math

import torch

BETAS = (0.9, 0.95)
CLIP_NORM = 1.0
LR_FLOOR = 0.1  # the cosine ends at this fraction of the peak learning rate
TARGET_WD, DRAFT_WD = 0.1, 0.05


def lr_at(step: int, total: int, peak: float, warmup: int, floor: float = LR_FLOOR) -> float:
    """Learning rate of `step` (0-based) of `total`: linear warm-up, then cosine to `floor` x peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def make_optimizer(model, lr: float, wd: float):
    """AdamW decaying the weight matrices only: norms and vectors keep their scale."""
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and "norm" not in n else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=BETAS,
        eps=1e-8,
    )


def set_lr(opt, lr: float) -> None:
    """Set every parameter group's learning rate (the schedule is applied before each step)."""
    for g in opt.param_groups:
        g["lr"] = lr


def step(model, opt, loss: torch.Tensor) -> None:
    """One optimiser step on `loss`, gradients clipped to `CLIP_NORM`."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    opt.step()
