"""What the model card reports, measured on the trained pair.

Validation losses and draft/target agreement teacher-forced on held-out text; agreement and expert
load on the target's own greedy continuations of the prompts (what traces record); sizes.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from tracer.training.config import PAD_ID


class ExpertCounter:
    """Routed slots per (layer, expert), summed over the tokens `add` is given."""

    def __init__(self, num_layers: int, num_experts: int):
        self.counts = torch.zeros(num_layers, num_experts, dtype=torch.long)

    def add(self, router_logits, top_k: int, keep: torch.Tensor | None = None):
        """Count each token's top-k experts per layer; `keep` (a bool per token) selects tokens."""
        for i, lg in enumerate(router_logits):
            idx = torch.topk(lg, top_k, dim=-1).indices  # (rows, k)
            if keep is not None:
                idx = idx[keep.reshape(-1)]
            self.counts[i] += torch.bincount(idx.reshape(-1), minlength=self.counts.shape[1])

    def summary(self) -> dict:
        """Per layer and worst over layers: max and min share over fair share, dead experts."""
        c = self.counts.double()
        fair = c.sum(1, keepdim=True) / c.shape[1]
        share = c / fair
        return {
            "routed_slots_per_layer": [int(v) for v in self.counts.sum(1)],
            "max_over_fair_per_layer": [round(float(v), 3) for v in share.max(1).values],
            "min_over_fair_per_layer": [round(float(v), 3) for v in share.min(1).values],
            "dead_experts_per_layer": [int(v) for v in (self.counts == 0).sum(1)],
            "max_over_fair": round(float(share.max()), 3),
            "dead_experts": int((self.counts == 0).sum()),
        }


@torch.no_grad()
def evaluate_val(target, draft, val: torch.Tensor, batch: int = 8) -> dict:
    """Losses, KL and top-1/top-4 agreement teacher-forced on validation windows, and routing."""
    cfg = target.config
    counter = ExpertCounter(cfg.num_hidden_layers, cfg.num_experts)
    t_nll = d_nll = kl_sum = 0.0
    n = agree1 = in_top4 = 0
    for i in range(0, len(val), batch):
        b = val[i : i + batch]
        x, y = b[:, :-1], b[:, 1:]
        to = target(input_ids=x, output_router_logits=True, use_cache=False)
        do = draft(input_ids=x, use_cache=False)
        V = to.logits.shape[-1]
        tl, dl = to.logits.reshape(-1, V).float(), do.logits.reshape(-1, V).float()  # (B*T, V)
        t_nll += float(F.cross_entropy(tl, y.reshape(-1), reduction="sum"))
        d_nll += float(F.cross_entropy(dl, y.reshape(-1), reduction="sum"))
        kl_sum += float(F.kl_div(F.log_softmax(dl, -1), F.log_softmax(tl, -1), log_target=True, reduction="sum"))
        t_top = tl.argmax(-1)
        agree1 += int((dl.argmax(-1) == t_top).sum())
        in_top4 += int((dl.topk(4, -1).indices == t_top[:, None]).any(-1).sum())
        n += tl.shape[0]
        counter.add(to.router_logits, cfg.num_experts_per_tok)
    return {
        "tokens": n,
        "target_val_loss": t_nll / n,
        "draft_val_loss": d_nll / n,
        "draft_kl_to_target": kl_sum / n,
        "top1_agreement": agree1 / n,
        "target_top1_in_draft_top4": in_top4 / n,
        "target_expert_balance": counter.summary(),
    }


@torch.no_grad()
def evaluate_greedy(target, draft, tokenizer, prompts: list[dict], new_tokens: int) -> dict:
    """Agreement and routing on the target's own greedy continuations (what traces record)."""
    cfg = target.config
    counter = ExpertCounter(cfg.num_hidden_layers, cfg.num_experts)
    task_counters: dict[str, ExpertCounter] = {}
    per_task: dict[str, list[int]] = {}
    for pr in prompts:
        ids = torch.tensor([tokenizer(pr["text"])["input_ids"]])
        out = target.generate(
            ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=PAD_ID,
            eos_token_id=None, output_router_logits=False,
        )
        P = ids.shape[1]
        seq = out[:, :]  # prompt + continuation
        to = target(input_ids=seq, output_router_logits=True, use_cache=False)
        do = draft(input_ids=seq, use_cache=False)
        # positions P-1 .. end-2 predict the generated tokens; the target's argmax there IS the
        # generated token (greedy), so draft argmax == target argmax is a chain-step acceptance.
        t_next = to.logits[0, P - 1 : -1].argmax(-1)
        d_next = do.logits[0, P - 1 : -1].argmax(-1)
        acc = per_task.setdefault(pr["task"], [0, 0])
        acc[0] += int((t_next == d_next).sum())
        acc[1] += int(t_next.numel())
        keep = torch.zeros(seq.shape[1], dtype=torch.bool)
        keep[P:] = True  # routing of the generated tokens only
        counter.add(to.router_logits, cfg.num_experts_per_tok, keep=keep)
        task_counter = task_counters.setdefault(pr["task"], ExpertCounter(cfg.num_hidden_layers, cfg.num_experts))
        task_counter.add(to.router_logits, cfg.num_experts_per_tok, keep=keep)
    tot = [sum(v[0] for v in per_task.values()), sum(v[1] for v in per_task.values())]
    return {
        "prompts": len(prompts),
        "new_tokens_per_prompt": new_tokens,
        "top1_agreement": tot[0] / max(1, tot[1]),
        "top1_agreement_per_task": {k: round(v[0] / v[1], 4) for k, v in sorted(per_task.items())},
        "target_expert_balance": counter.summary(),
        # what a trace of one task kind sees (`ecosim inspect`): experts can specialise by domain
        "target_expert_balance_per_task": {
            k: {key: c.summary()[key] for key in ("max_over_fair", "dead_experts")}
            for k, c in sorted(task_counters.items())
        },
    }


def count_params(model) -> dict:
    """Total, routed-expert, embedding and non-expert parameters (active per token left to fill)."""
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    emb = model.get_input_embeddings().weight.numel()
    return {"total": total, "routed_experts": experts, "embedding": emb,
            "non_expert": total - experts,
            "active_per_token": None}


def dir_bytes(d: Path) -> int:
    """Bytes of every file under `d` (a saved model's size on disk)."""
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
