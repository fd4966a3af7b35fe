"""Train EcoSim's embedded default model pair: a tiny Qwen3-MoE target and a small dense draft.

    python -m tracer.train_pair --out models/ecosim-tiny --seed 0

Everything is trained here, on CPU, from text that ships with Python (see ``tracer.corpus``):

1. a byte-level BPE tokenizer (``tokenizers``), saved in the Hugging Face format;
2. the target, ``Qwen3MoeForCausalLM`` (32 routed experts, top-4), trained on next-token loss plus
   a per-layer Switch-style load-balancing loss so that every expert of every layer is used;
3. the draft, a dense ``Qwen3ForCausalLM`` sharing the tokenizer, distilled from the target's
   logits (forward KL) plus next-token loss, its embeddings initialised from the target's.

Then it measures what the model card reports (validation losses, draft/target top-1 agreement on
validation text and on the target's own greedy continuations of ``prompts/*.jsonl``, expert load
balance per layer), saves both models as safetensors with the tokenizer, and writes
``MODEL_CARD.md`` and ``train_metrics.json`` into ``--out``.

Deterministic for a given seed, machine kind and library versions: seeded torch, data windows
drawn from a seeded ``torch.Generator``, corpus files in sorted order.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tracer.corpus import LICENCE, collect, split, stdlib_root

SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>"]  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


# ----------------------------------------------------------------------------------------------
# configs


def target_config(vocab_size: int, seq_len: int, balance_coef: float = 0.02):
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        vocab_size=vocab_size,
        hidden_size=192,
        intermediate_size=768,  # unused: every layer is MoE (decoder_sparse_step=1, no mlp_only_layers)
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=max(512, seq_len),
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        decoder_sparse_step=1,
        mlp_only_layers=[],
        moe_intermediate_size=64,
        num_experts=32,
        num_experts_per_tok=4,
        norm_topk_prob=True,
        output_router_logits=True,
        router_aux_loss_coef=balance_coef,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )


def draft_config(vocab_size: int, seq_len: int, layers: int = 2):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=192,  # same width as the target so its embeddings can seed the draft's
        intermediate_size=768,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=max(512, seq_len),
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )


# ----------------------------------------------------------------------------------------------
# tokenizer and data


def train_tokenizer(train_texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_texts, trainer=trainer)
    assert [tok.token_to_id(s) for s in SPECIALS] == [PAD_ID, BOS_ID, EOS_ID]
    # encode(text) gives <|bos|> + ids, as in training (each document is <|bos|> text <|eos|>).
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A",
        pair="<|bos|> $A <|bos|> $B",
        special_tokens=[("<|bos|>", BOS_ID)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        model_max_length=4096,
    )
    return tok, fast


def encode_stream(tok, texts: list[str]) -> torch.Tensor:
    """<|bos|> doc <|eos|> for every document, concatenated into one 1-D stream."""
    encs = tok.encode_batch(texts, add_special_tokens=False)
    parts = []
    for e in encs:
        parts.append(np.asarray([BOS_ID] + e.ids + [EOS_ID], dtype=np.int64))
    return torch.from_numpy(np.concatenate(parts))


class Windows:
    """Random (seeded) windows of seq_len+1 tokens from a stream."""

    def __init__(self, stream: torch.Tensor, seq_len: int, batch: int, seed: int):
        self.stream, self.seq_len, self.batch = stream, seq_len, batch
        self.gen = torch.Generator().manual_seed(seed)

    def next(self) -> torch.Tensor:
        hi = len(self.stream) - self.seq_len - 1
        starts = torch.randint(0, hi, (self.batch,), generator=self.gen)
        return torch.stack([self.stream[s : s + self.seq_len + 1] for s in starts.tolist()])


def eval_windows(stream: torch.Tensor, seq_len: int, max_tokens: int) -> torch.Tensor:
    """Non-overlapping validation windows from the start of the stream (deterministic)."""
    n = min(max_tokens, len(stream) - 1) // seq_len
    return torch.stack([stream[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)])


# ----------------------------------------------------------------------------------------------
# losses and schedule


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


def lr_at(step: int, total: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def make_optimizer(model, lr: float, wd: float):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and "norm" not in n else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )


def fmt_time(s: float) -> str:
    s = int(s)
    return f"{s // 60:d}m{s % 60:02d}s"


# ----------------------------------------------------------------------------------------------
# training loops


def train_target(model, windows: Windows, steps: int, lr: float, warmup: int, log_every: int, t0: float,
                 seq_coef: float = 0.0, label: str = "target"):
    """Next-token loss + the batch balance loss, plus `seq_coef` x the sequence-wise balance loss
    when it is positive (the second stage, `tracer.rebalance`; the term is not computed at 0)."""
    cfg = model.config
    opt = make_optimizer(model, lr, wd=0.1)
    model.train()
    hist = []
    t_start = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        batch = windows.next()
        x, y = batch[:, :-1], batch[:, 1:]
        out = model(input_ids=x, output_router_logits=True, use_cache=False)
        ce = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), y.reshape(-1))
        bal = per_layer_balance_loss(out.router_logits, cfg.num_experts_per_tok)
        loss = ce + cfg.router_aux_loss_coef * bal
        terms = [ce.item(), bal.item()]
        if seq_coef > 0:
            seq = sequence_balance_loss(out.router_logits, x.shape[0], cfg.num_experts_per_tok)
            loss = loss + seq_coef * seq
            terms.append(seq.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        hist.append(terms)
        if step % log_every == 0 or step == steps - 1:
            k = min(len(hist), log_every)
            m = [sum(h[i] for h in hist[-k:]) / k for i in range(len(terms))]
            el = time.time() - t_start
            eta = el / (step + 1) * (steps - step - 1)
            seq_txt = f" seq-bal {m[2]:.4f}" if seq_coef > 0 else ""
            print(
                f"[{label}] step {step + 1:5d}/{steps} ce {m[0]:.4f} bal {m[1]:.4f}{seq_txt} "
                f"lr {opt.param_groups[0]['lr']:.2e} | {el / (step + 1):.2f}s/step "
                f"eta {fmt_time(eta)} total {fmt_time(time.time() - t0)}",
                flush=True,
            )
    model.eval()
    k = min(len(hist), 50)
    stats = {"final_train_ce_last50": sum(h[0] for h in hist[-k:]) / k,
             "final_train_balance_loss_last50": sum(h[1] for h in hist[-k:]) / k}
    if seq_coef > 0:
        stats["final_train_seq_balance_loss_last50"] = sum(h[2] for h in hist[-k:]) / k
    return {**stats, "seconds": time.time() - t_start}


def train_draft(draft, target, windows: Windows, steps: int, lr: float, warmup: int, alpha: float,
                temperature: float, log_every: int, t0: float):
    opt = make_optimizer(draft, lr, wd=0.05)
    draft.train()
    target.eval()
    hist = []
    t_start = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        batch = windows.next()
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.no_grad():
            t_logits = target(input_ids=x, output_router_logits=False, use_cache=False).logits
            t_logp = F.log_softmax(t_logits.float() / temperature, dim=-1).reshape(-1, t_logits.shape[-1])
        d_logits = draft(input_ids=x, use_cache=False).logits.reshape(-1, t_logits.shape[-1])
        d_logp_T = F.log_softmax(d_logits / temperature, dim=-1)
        kl = F.kl_div(d_logp_T, t_logp, log_target=True, reduction="batchmean") * temperature**2
        ce = F.cross_entropy(d_logits, y.reshape(-1))
        loss = alpha * kl + (1 - alpha) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            agree = float((d_logits.argmax(-1) == t_logits.reshape(d_logits.shape).argmax(-1)).float().mean())
        hist.append((ce.item(), kl.item(), agree))
        if step % log_every == 0 or step == steps - 1:
            k = min(len(hist), log_every)
            m = [sum(h[i] for h in hist[-k:]) / k for i in range(3)]
            el = time.time() - t_start
            eta = el / (step + 1) * (steps - step - 1)
            print(
                f"[draft]  step {step + 1:5d}/{steps} ce {m[0]:.4f} kl {m[1]:.4f} agree {m[2]:.3f} "
                f"lr {opt.param_groups[0]['lr']:.2e} | {el / (step + 1):.2f}s/step "
                f"eta {fmt_time(eta)} total {fmt_time(time.time() - t0)}",
                flush=True,
            )
    draft.eval()
    k = min(len(hist), 50)
    return {"final_train_ce_last50": sum(h[0] for h in hist[-k:]) / k,
            "final_train_kl_last50": sum(h[1] for h in hist[-k:]) / k,
            "final_train_agree_last50": sum(h[2] for h in hist[-k:]) / k,
            "seconds": time.time() - t_start}


# ----------------------------------------------------------------------------------------------
# measurements


class ExpertCounter:
    def __init__(self, num_layers: int, num_experts: int):
        self.counts = torch.zeros(num_layers, num_experts, dtype=torch.long)

    def add(self, router_logits, top_k: int, keep: torch.Tensor | None = None):
        for i, lg in enumerate(router_logits):
            idx = torch.topk(lg, top_k, dim=-1).indices  # (rows, k)
            if keep is not None:
                idx = idx[keep.reshape(-1)]
            self.counts[i] += torch.bincount(idx.reshape(-1), minlength=self.counts.shape[1])

    def summary(self) -> dict:
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
        tl, dl = to.logits.reshape(-1, V).float(), do.logits.reshape(-1, V).float()
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


def load_prompts(prompt_dir: Path) -> list[dict]:
    prompts = []
    for p in sorted(prompt_dir.glob("*.jsonl")):
        for line in p.read_text(encoding="utf-8").splitlines():
            if line.strip():
                prompts.append(json.loads(line))
    return prompts


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
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    emb = model.get_input_embeddings().weight.numel()
    return {"total": total, "routed_experts": experts, "embedding": emb,
            "non_expert": total - experts,
            "active_per_token": None}


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------------
# model card


def write_card(out: Path, m: dict) -> None:
    tc, dc = m["target_config"], m["draft_config"]
    tb_val, tb_gen = m["val"]["target_expert_balance"], m["greedy"]["target_expert_balance"]
    def row(name, b):
        return "\n".join(
            f"| {name} | {i} | {b['max_over_fair_per_layer'][i]:.2f} | {b['min_over_fair_per_layer'][i]:.2f} "
            f"| {b['dead_experts_per_layer'][i]} | {b['routed_slots_per_layer'][i]:,} |"
            for i in range(len(b["max_over_fair_per_layer"]))
        )
    tp, dp = m["target_params"], m["draft_params"]
    tcfg_keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok",
                 "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
                 "tie_word_embeddings", "max_position_embeddings", "rope_theta", "rms_norm_eps",
                 "hidden_act", "output_router_logits", "router_aux_loss_coef",
                 "bos_token_id", "eos_token_id", "pad_token_id"]
    dcfg_keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "tie_word_embeddings",
                 "max_position_embeddings", "rope_theta", "rms_norm_eps", "hidden_act",
                 "bos_token_id", "eos_token_id", "pad_token_id"]
    def cfg_table(c, keys):
        return "\n".join(f"| `{k}` | `{json.dumps(c.get(k))}` |" for k in keys)
    a = m["args"]
    per_task = ", ".join(f"{k} {v:.1%}" for k, v in m["greedy"]["top1_agreement_per_task"].items())
    cpu_note = ""
    if m.get("cpu_seconds"):
        cpu_note = (f"; CPU time of the process {fmt_time(m['cpu_seconds'])} ({m['cpu_seconds'] / 60:.0f} CPU "
                    f"minutes; where other work shares the cores, both are upper bounds)")
    min_task = min(m["greedy"]["top1_agreement_per_task"].values())
    rb = m.get("rebalance")
    rebalance_cmd = f"\n{rb['command']}" if rb else ""
    rebalance_section = _rebalance_section(m) if rb else ""
    total_wall = m["wall_seconds"] + (rb["wall_seconds"] if rb else 0.0)
    per_task_bal = m["greedy"].get("target_expert_balance_per_task", {})
    def yes(ok):
        return "yes" if ok else "**no**"
    task_rows = "".join(
        f"| no expert above 4x its fair share, nor dead, on each task's greedy continuations ({k}) "
        f"| {v['max_over_fair']:.2f}x, {v['dead_experts']} dead | {yes(v['max_over_fair'] <= 4.0 and v['dead_experts'] == 0)} |\n"
        for k, v in per_task_bal.items()
    )
    for c in (tc, dc):  # transformers 5 serialises Qwen3-MoE's num_experts as num_local_experts
        if c.get("num_experts") is None and c.get("num_local_experts") is not None:
            c["num_experts"] = c["num_local_experts"]
    text = f"""# ecosim-tiny: EcoSim's embedded default target/draft pair

A tiny Mixture-of-Experts **target** (`Qwen3MoeForCausalLM`) and a small dense **draft**
(`Qwen3ForCausalLM`) trained from scratch on CPU, on text that ships with every Python install.
They exist so that EcoSim can record *real* speculative-decoding traces (real routing, real
acceptance) on a fresh clone without downloading anything. They are not useful language models
beyond that: they only know Python's standard library and its pydoc topics.

Everything below was measured by the training script itself (`tracer/train_pair.py`) at the end
of the run that produced the committed weights; the raw numbers are in `train_metrics.json`.

## Retrain

```
{m['command']}{rebalance_cmd}
```

Seed {a['seed']}. Deterministic given the seed, the machine kind, the Python standard library the
corpus is read from (here Python {m['python']} at `{m['stdlib_root']}`), torch {m['torch']} and
transformers {m['transformers']}. Wall time of this run: **{fmt_time(m['wall_seconds'])}**
({m['wall_seconds']:.0f} s) on {m['threads']} CPU threads ({m['machine']}){cpu_note}.

## Files

| dir | contents | size on disk |
|---|---|---|
| `target/` | `config.json`, `generation_config.json`, `model.safetensors` (fp32), tokenizer | {m['target_bytes'] / 1e6:.2f} MB |
| `draft/` | same layout, dense model | {m['draft_bytes'] / 1e6:.2f} MB |

Both load with `AutoModelForCausalLM.from_pretrained(dir)` and
`AutoTokenizer.from_pretrained(dir)`; the two tokenizers are identical.

## Tokenizer

Byte-level BPE (`tokenizers`), vocabulary {m['vocab_size']} including the specials
`<|pad|>`=0, `<|bos|>`=1, `<|eos|>`=2, trained on the training split. GPT-2 style byte-level
pre-tokenisation without a prefix space, so `decode(encode(text))` round-trips any text exactly.
`tokenizer(text)` prepends `<|bos|>` (as in training, where each document is
`<|bos|> text <|eos|>`); use `add_special_tokens=False` to leave it out.

## Target: `Qwen3MoeForCausalLM`

| key | value |
|---|---|
{cfg_table(tc, tcfg_keys)}

Every layer is MoE ({tc['num_experts']} routed experts, top-{tc['num_experts_per_tok']}, no shared expert). In memory
(transformers 5) the experts are fused per layer: `mlp.experts.gate_up_proj` (experts,
2*moe_intermediate, hidden; gate rows first, then up rows) and `mlp.experts.down_proj` (experts,
hidden, moe_intermediate). `save_pretrained` writes them in the per-expert layout
(`model.layers.{{i}}.mlp.experts.{{e}}.{{gate,up,down}}_proj.weight`) and `from_pretrained` fuses
them again. The router is `model.layers.{{i}}.mlp.gate` (softmax, top-{tc['num_experts_per_tok']}, renormalised). One routed expert is
3 x {tc['hidden_size']} x {tc['moe_intermediate_size']} = {3 * tc['hidden_size'] * tc['moe_intermediate_size']:,}
parameters = {m['expert_bytes_fp32']:,} bytes in fp32. `tracer/widen.py` makes a
*bandwidth-bound replica* with wider experts and identical function and routing (extra
intermediate units whose down-projection columns are zero; built by a command, not committed):
`python -m tracer.widen --model models/ecosim-tiny/target --factor 16 --out DIR`.

Parameters: {tp['total']:,} total; routed experts {tp['routed_experts']:,}; everything else
{tp['non_expert']:,} (of which the tied embedding / LM head {tp['embedding']:,}). Active per
token: {m['target_active_params']:,} (non-expert + {tc['num_experts_per_tok']} of {tc['num_experts']} experts per layer).

## Draft: `Qwen3ForCausalLM` (dense)

| key | value |
|---|---|
{cfg_table(dc, dcfg_keys)}

Parameters: {dp['total']:,} total (tied embedding / LM head {dp['embedding']:,}). Its embedding
was initialised from the trained target's embedding (same width), then everything was trained.

## Data and licence

Python {m['python']}'s standard library sources (`*.py` under `sysconfig.get_paths()["stdlib"]`, sorted,
skipping `site-packages`, test suites, `lib2to3`, `__pycache__` and files over 400 kB) plus the
pydoc topics (`pydoc_data.topics.topics`). {m['data']['documents']} documents; split by a hash of each
document's name (5% validation, whole documents): train {m['data']['train_docs']} documents /
{m['data']['train_tokens']:,} tokens, validation {m['data']['val_docs']} documents /
{m['data']['val_tokens']:,} tokens. Licence of the training text: **{LICENCE}**; the weights
are derived from it.

## Training

| | target | draft |
|---|---|---|
| steps | {a['target_steps']} | {a['draft_steps']} |
| batch x sequence length | {a['batch']} x {a['seq_len']} ({a['batch'] * a['seq_len']:,} tokens/step) | same |
| tokens seen | {a['target_steps'] * a['batch'] * a['seq_len']:,} | {a['draft_steps'] * a['batch'] * a['seq_len']:,} |
| optimiser | AdamW (0.9, 0.95), wd 0.1, clip 1.0 | AdamW (0.9, 0.95), wd 0.05, clip 1.0 |
| peak lr, schedule | {a['target_lr']}, {a['warmup']} warm-up steps, cosine to 10% | {a['draft_lr']}, same schedule |
| loss | CE + {tc['router_aux_loss_coef']} x load-balancing loss (Switch-style, **per layer**, averaged) | {a['alpha']} x KL(target ‖ draft) at T={a['temperature']} + {1 - a['alpha']:.2f} x CE |
| wall time | {fmt_time(m['target_train']['seconds'])} | {fmt_time(m['draft_train']['seconds'])} |
| final train loss (mean of last 50 steps) | CE {m['target_train']['final_train_ce_last50']:.4f}, balance {m['target_train']['final_train_balance_loss_last50']:.4f} (1.0 = perfect) | CE {m['draft_train']['final_train_ce_last50']:.4f}, KL {m['draft_train']['final_train_kl_last50']:.4f} |
| **validation loss** (CE, nats/token, {m['val']['tokens']:,} tokens) | **{m['val']['target_val_loss']:.4f}** | **{m['val']['draft_val_loss']:.4f}** |

Random data windows from a seeded `torch.Generator`; training used transformers'
`{a.get('train_experts_impl', 'grouped_mm')}` experts kernel (the saved config leaves the default), evaluation the default
(`eager`). The script turns on `torch.use_deterministic_algorithms(True)`: without it the
backward of the MoE block's token gather (CPU `index_put_` with accumulate, parallel atomic adds)
is not bitwise reproducible with more than one thread, and two runs with the same seed drift
apart within tens of steps. (The committed weights were trained this way; a second full run to
confirm the bitwise reproduction was not made.)
{rebalance_section}
## Draft-target agreement (measured)

- Validation text, teacher-forced, {m['val']['tokens']:,} positions: draft top-1 == target top-1
  **{m['val']['top1_agreement']:.1%}**; target top-1 within draft top-4
  {m['val']['target_top1_in_draft_top4']:.1%}; KL(target ‖ draft) {m['val']['draft_kl_to_target']:.3f} nats/token.
- The target's own greedy continuations ({m['greedy']['new_tokens_per_prompt']} new tokens for each of the
  {m['greedy']['prompts']} prompts in `prompts/*.jsonl`), which is what traces record: draft top-1 ==
  target's next token **{m['greedy']['top1_agreement']:.1%}** ({per_task}).

## Expert load balance of the target (measured)

Share of routed slots per expert over fair share (1/32 of a layer's slots): max, min, and dead
(never chosen) experts, per layer.

| text | layer | max / fair | min / fair | dead | routed slots |
|---|---|---|---|---|---|
{row("validation", tb_val)}
{row("greedy continuations", tb_gen)}

Worst over all layers: validation max/fair {tb_val['max_over_fair']:.2f}, dead {tb_val['dead_experts']};
greedy continuations max/fair {tb_gen['max_over_fair']:.2f}, dead {tb_gen['dead_experts']}.
{"Per task kind (each trace records one): " + ", ".join(f"{k} {v['max_over_fair']:.2f}x / {v['dead_experts']} dead" for k, v in per_task_bal.items()) + "." if per_task_bal else ""}

## Against the targets of the issue

| target | measured | met |
|---|---|---|
| pair well under 50 MB | {(m['target_bytes'] + m['draft_bytes']) / 1e6:.1f} MB | {yes((m['target_bytes'] + m['draft_bytes']) < 40e6)} |
| a few tens of CPU minutes (aim <= 30 min wall on 2 threads) | {fmt_time(total_wall)}{' (both stages)' if rb else ''} | {yes(total_wall <= 30 * 60)} |
| greedy top-1 agreement >= 60% on every task kind (proxy for accepted length + 1 >= 2 under a 16-node tree) | {min_task:.1%} (worst task) | {yes(min_task >= 0.60)} |
| no expert above 4x its fair share on the greedy continuations | {tb_gen['max_over_fair']:.2f}x | {yes(tb_gen['max_over_fair'] <= 4.0)} |
| no dead expert on the greedy continuations | {tb_gen['dead_experts']} dead | {yes(tb_gen['dead_experts'] == 0)} |
{task_rows}"""
    (out / "MODEL_CARD.md").write_text(text, encoding="utf-8")


def _rebalance_section(m: dict) -> str:
    """The card's account of `tracer.rebalance`, the second stage (sequence-wise balancing)."""
    rb, a = m["rebalance"], m["rebalance"]["args"]
    t, d = rb["target_train"], rb["draft_train"]
    before = rb["before"]["greedy"].get("target_expert_balance_per_task", {})
    before_txt = ", ".join(f"{k} {v['max_over_fair']:.2f}x" for k, v in before.items())
    return f"""
## Stage 2: sequence-wise rebalancing (`tracer/rebalance.py`)

The batch-level balance loss above lets experts specialise by domain (prose to a few, code to
others); a trace records one task kind, so a specialised expert can take several times its fair
share of a trace{f" (before this stage, greedy continuations per task: {before_txt})" if before_txt else ""}. This stage
continues training the target for **{a['target_steps']} steps** (lr {a['target_lr']}, 10% warm-up,
cosine) with CE + {m['target_config']['router_aux_loss_coef']} x the batch balance loss +
**{a['seq_balance_coef']} x a sequence-wise balance loss** (the Switch loss over each sequence on its own,
as DeepSeek-V3's complementary loss), then re-distils the draft for **{a['draft_steps']} steps**
(lr {a['draft_lr']}, same KL + CE mix). Final train losses (last 50 steps): target CE
{t['final_train_ce_last50']:.4f}, batch balance {t['final_train_balance_loss_last50']:.4f}, sequence balance
{t['final_train_seq_balance_loss_last50']:.4f}; draft CE {d['final_train_ce_last50']:.4f}, KL
{d['final_train_kl_last50']:.4f}. Wall time {fmt_time(rb['wall_seconds'])}. Every figure below is
measured after this stage; the first stage's are kept in `train_metrics.json` under
`rebalance.before`.
"""


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("models/ecosim-tiny"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="set both --target-steps and --draft-steps")
    ap.add_argument("--target-steps", type=int, default=1600)
    ap.add_argument("--draft-steps", type=int, default=1400)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--target-lr", type=float, default=2e-3)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.8, help="weight of the KL term for the draft")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--balance-coef", type=float, default=0.02,
                    help="weight of the per-layer load-balancing loss (saved as router_aux_loss_coef)")
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--max-files", type=int, default=None, help="use only the first N stdlib files")
    ap.add_argument("--val-tokens", type=int, default=32768)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=Path, default=Path("prompts"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--train-experts-impl", default="eager",
                    help="experts kernel used while training (eager, grouped_mm); grouped_mm is not "
                         "deterministic on CPU with several threads")
    ap.add_argument("--card-only", action="store_true",
                    help="only rewrite --out/MODEL_CARD.md from --out/train_metrics.json (no training)")
    args = ap.parse_args(argv)
    if args.card_only:
        m = json.loads((args.out / "train_metrics.json").read_text(encoding="utf-8"))
        write_card(args.out, m)
        print(f"[card] rewrote {args.out / 'MODEL_CARD.md'} from train_metrics.json ({m['command']})")
        return 0
    if args.steps is not None:
        args.target_steps = args.draft_steps = args.steps
    args.warmup = min(args.warmup, max(1, args.target_steps // 10), max(1, args.draft_steps // 10))

    t0 = time.time()
    torch.set_num_threads(args.threads)
    # Bitwise reproducibility: without this, the backward of the MoE block's token gather
    # (index_put_ with accumulate, parallel atomic adds on CPU) differs from run to run with more
    # than one thread, and runs with the same seed drift apart within tens of steps.
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    import transformers
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM
    transformers.logging.set_verbosity_error()

    # 1. data + tokenizer
    docs = collect(args.max_files)
    train_docs, val_docs = split(docs)
    tok, fast = train_tokenizer([d.text for d in train_docs], args.vocab_size)
    train_stream = encode_stream(tok, [d.text for d in train_docs])
    val_stream = encode_stream(tok, [d.text for d in val_docs])
    V = tok.get_vocab_size()
    print(f"[data] {len(docs)} docs (train {len(train_docs)}, val {len(val_docs)}); "
          f"tokens train {len(train_stream):,} val {len(val_stream):,}; vocab {V} "
          f"| {fmt_time(time.time() - t0)}", flush=True)

    # 2. target
    torch.manual_seed(args.seed)
    tcfg = target_config(V, args.seq_len, args.balance_coef)
    target = Qwen3MoeForCausalLM._from_config(tcfg, attn_implementation="sdpa", dtype=torch.float32)
    if args.train_experts_impl != "eager":
        target.set_experts_implementation(args.train_experts_impl)
    print(f"[target] {sum(p.numel() for p in target.parameters()):,} params", flush=True)
    t_stats = train_target(target, Windows(train_stream, args.seq_len, args.batch, args.seed + 1),
                           args.target_steps, args.target_lr, args.warmup, args.log_every, t0)

    # 3. draft
    torch.manual_seed(args.seed + 2)
    dcfg = draft_config(V, args.seq_len, args.draft_layers)
    draft = Qwen3ForCausalLM._from_config(dcfg, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(target.get_input_embeddings().weight)
    print(f"[draft] {sum(p.numel() for p in draft.parameters()):,} params", flush=True)
    d_stats = train_draft(draft, target, Windows(train_stream, args.seq_len, args.batch, args.seed + 3),
                          args.draft_steps, args.draft_lr, args.warmup, args.alpha, args.temperature,
                          args.log_every, t0)

    # 4. measure with the default (eager) experts kernel, as a user would load the model
    target.set_experts_implementation("eager")
    val_windows = eval_windows(val_stream, args.seq_len, args.val_tokens)
    val = evaluate_val(target, draft, val_windows)
    print(f"[eval] val loss target {val['target_val_loss']:.4f} draft {val['draft_val_loss']:.4f} "
          f"top1 agreement {val['top1_agreement']:.3f} | balance max/fair "
          f"{val['target_expert_balance']['max_over_fair']} dead {val['target_expert_balance']['dead_experts']}",
          flush=True)
    prompts = load_prompts(args.prompts) if args.prompts.is_dir() else []
    greedy = evaluate_greedy(target, draft, fast, prompts, args.gen_tokens) if prompts else {}
    if greedy:
        print(f"[eval] greedy continuations: agreement {greedy['top1_agreement']:.3f} "
              f"{greedy['top1_agreement_per_task']} | balance max/fair "
              f"{greedy['target_expert_balance']['max_over_fair']} dead "
              f"{greedy['target_expert_balance']['dead_experts']}", flush=True)

    # 5. save
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for sub, mdl in (("target", target), ("draft", draft)):
        d = out / sub
        d.mkdir(parents=True, exist_ok=True)
        mdl.generation_config.pad_token_id = PAD_ID
        mdl.generation_config.bos_token_id = BOS_ID
        mdl.generation_config.eos_token_id = EOS_ID
        mdl.save_pretrained(d, safe_serialization=True)
        fast.save_pretrained(d)

    tparams, dparams = count_params(target), count_params(draft)
    per_expert = 3 * tcfg.hidden_size * tcfg.moe_intermediate_size
    tparams["active_per_token"] = tparams["non_expert"] + tcfg.num_hidden_layers * tcfg.num_experts_per_tok * per_expert
    metrics = {
        "command": "python -m tracer.train_pair " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "python": platform.python_version(),
        "stdlib_root": str(stdlib_root()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "threads": args.threads,
        "vocab_size": V,
        "data": {"documents": len(docs), "train_docs": len(train_docs), "val_docs": len(val_docs),
                 "train_tokens": len(train_stream), "val_tokens": len(val_stream)},
        "target_config": json.loads(target.config.to_json_string()),
        "draft_config": json.loads(draft.config.to_json_string()),
        "target_params": tparams,
        "draft_params": dparams,
        "target_active_params": tparams["active_per_token"],
        "expert_bytes_fp32": per_expert * 4,
        "target_train": t_stats,
        "draft_train": d_stats,
        "val": val,
        "greedy": greedy,
        "target_bytes": dir_bytes(out / "target"),
        "draft_bytes": dir_bytes(out / "draft"),
        "wall_seconds": time.time() - t0,
        "cpu_seconds": time.process_time(),  # this process, all threads (others may share the cores)
    }
    # rope_theta lives in rope_parameters in transformers 5; surface it for the card's table
    for c in (metrics["target_config"], metrics["draft_config"]):
        c.setdefault("rope_theta", (c.get("rope_parameters") or {}).get("rope_theta"))
        c.setdefault("head_dim", c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    if greedy:
        write_card(out, metrics)
    print(f"[done] saved to {out} | target {metrics['target_bytes'] / 1e6:.2f} MB, draft "
          f"{metrics['draft_bytes'] / 1e6:.2f} MB | wall {fmt_time(metrics['wall_seconds'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
