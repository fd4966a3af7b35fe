"""The draft's training loop: distillation from the frozen target plus next-token loss.

Loss: `alpha` x KL(target || draft) at `temperature` (scaled by T^2, Hinton et al.) + (1 - alpha)
x cross-entropy. The logged agreement (draft top-1 == target top-1) is what drafting needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tracer.training.data import Windows
from tracer.training.log import StepLog
from tracer.training.schedule import DRAFT_WD, lr_at, make_optimizer, set_lr, step as optimizer_step


def train_draft(draft, target, windows: Windows, steps: int, lr: float, warmup: int, alpha: float,
                temperature: float, log_every: int, t0: float):
    """Distil `draft` from `target` for `steps` steps; returns the final train losses and seconds."""
    opt = make_optimizer(draft, lr, wd=DRAFT_WD)
    draft.train()
    target.eval()
    log = StepLog("[draft] ", [("ce", ".4f"), ("kl", ".4f"), ("agree", ".3f")], steps, log_every, t0)
    for step in range(steps):
        set_lr(opt, lr_at(step, steps, lr, warmup))
        batch = windows.next()
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.no_grad():
            t_logits = target(input_ids=x, output_router_logits=False, use_cache=False).logits
            t_logp = F.log_softmax(t_logits.float() / temperature, dim=-1).reshape(-1, t_logits.shape[-1])
        d_logits = draft(input_ids=x, use_cache=False).logits.reshape(-1, t_logits.shape[-1])  # (B*T, V)
        d_logp_T = F.log_softmax(d_logits / temperature, dim=-1)
        kl = F.kl_div(d_logp_T, t_logp, log_target=True, reduction="batchmean") * temperature**2
        ce = F.cross_entropy(d_logits, y.reshape(-1))
        loss = alpha * kl + (1 - alpha) * ce
        optimizer_step(draft, opt, loss)
        with torch.no_grad():
            agree = float((d_logits.argmax(-1) == t_logits.reshape(d_logits.shape).argmax(-1)).float().mean())
        log.add(step, (ce.item(), kl.item(), agree), opt.param_groups[0]["lr"])
    draft.eval()
    return log.final(["final_train_ce_last50", "final_train_kl_last50", "final_train_agree_last50"])
