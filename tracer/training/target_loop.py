"""The target's training loop: next-token loss plus expert load balancing.

Stage 1 (`tracer.train_pair`) balances each layer's experts over the batch; stage 2
(`tracer.rebalance`) adds a sequence-wise term so that experts do not specialise by domain.
"""

from __future__ import annotations

import torch.nn.functional as F

from tracer.training.balance import per_layer_balance_loss, sequence_balance_loss
from tracer.training.data import Windows
from tracer.training.log import StepLog
from tracer.training.schedule import TARGET_WD, lr_at, make_optimizer, set_lr, step as optimizer_step


def train_target(model, windows: Windows, steps: int, lr: float, warmup: int, log_every: int, t0: float,
                 seq_coef: float = 0.0, label: str = "target"):
    """Next-token loss + the batch balance loss, plus `seq_coef` x the sequence-wise balance loss
    when it is positive (the second stage, `tracer.rebalance`; the term is not computed at 0)."""
    cfg = model.config
    opt = make_optimizer(model, lr, wd=TARGET_WD)
    model.train()
    terms = [("ce", ".4f"), ("bal", ".4f")] + ([("seq-bal", ".4f")] if seq_coef > 0 else [])
    log = StepLog(f"[{label}]", terms, steps, log_every, t0)
    for step in range(steps):
        set_lr(opt, lr_at(step, steps, lr, warmup))
        batch = windows.next()
        x, y = batch[:, :-1], batch[:, 1:]
        out = model(input_ids=x, output_router_logits=True, use_cache=False)
        ce = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1))
        bal = per_layer_balance_loss(out.router_logits, cfg.num_experts_per_tok)
        loss = ce + cfg.router_aux_loss_coef * bal
        values = [ce.item(), bal.item()]
        if seq_coef > 0:
            seq = sequence_balance_loss(out.router_logits, x.shape[0], cfg.num_experts_per_tok)
            loss = loss + seq_coef * seq
            values.append(seq.item())
        optimizer_step(model, opt, loss)
        log.add(step, values, opt.param_groups[0]["lr"])
    model.eval()
    keys = ["final_train_ce_last50", "final_train_balance_loss_last50"]
    return log.final(keys + (["final_train_seq_balance_loss_last50"] if seq_coef > 0 else []))
