"""One run of `python -m tracer.train_pair`: seed, data, target, draft, measure, save, metrics.

Each stage is a function so that a reader can follow the run top to bottom in `run`, and the
second stage (`tracer.rebalance`) shares the seeding.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tracer.corpus import collect, split, stdlib_root
from tracer.training.card import write_card
from tracer.training.config import BOS_ID, EOS_ID, PAD_ID, draft_config, target_config
from tracer.training.data import Windows, encode_stream, eval_windows, load_prompts, train_tokenizer
from tracer.training.distill import train_draft
from tracer.training.log import fmt_time
from tracer.training.measure import count_params, dir_bytes, evaluate_greedy, evaluate_val
from tracer.training.target_loop import train_target


def deterministic(seed: int, threads: int) -> None:
    """Seed every generator and make torch bitwise reproducible on `threads` CPU threads.

    Without `use_deterministic_algorithms`, the backward of the MoE block's token gather
    (index_put_ with accumulate, parallel atomic adds on CPU) differs from run to run with more
    than one thread, and runs with the same seed drift apart within tens of steps.
    """
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Corpus:
    """The tokenizer and the token streams of both splits, with the counts the card reports."""

    tok: object  # tokenizers.Tokenizer
    fast: object  # transformers.PreTrainedTokenizerFast, saved with both models
    train_stream: torch.Tensor
    val_stream: torch.Tensor
    counts: dict[str, int]


def prepare_data(max_files: int | None, vocab_size: int, t0: float) -> Corpus:
    """Collect and split the stdlib corpus, train the tokenizer on the training split, encode."""
    docs = collect(max_files)
    train_docs, val_docs = split(docs)
    tok, fast = train_tokenizer([d.text for d in train_docs], vocab_size)
    train_stream = encode_stream(tok, [d.text for d in train_docs])
    val_stream = encode_stream(tok, [d.text for d in val_docs])
    print(f"[data] {len(docs)} docs (train {len(train_docs)}, val {len(val_docs)}); "
          f"tokens train {len(train_stream):,} val {len(val_stream):,}; vocab {tok.get_vocab_size()} "
          f"| {fmt_time(time.time() - t0)}", flush=True)
    counts = {"documents": len(docs), "train_docs": len(train_docs), "val_docs": len(val_docs),
              "train_tokens": len(train_stream), "val_tokens": len(val_stream)}
    return Corpus(tok, fast, train_stream, val_stream, counts)


def fit_target(args: argparse.Namespace, corpus: Corpus, t0: float):
    """(target, its training stats): a fresh Qwen3-MoE target trained from seed + 0 / + 1."""
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(args.seed)
    tcfg = target_config(corpus.tok.get_vocab_size(), args.seq_len, args.balance_coef)
    target = Qwen3MoeForCausalLM._from_config(tcfg, attn_implementation="sdpa", dtype=torch.float32)
    if args.train_experts_impl != "eager":
        target.set_experts_implementation(args.train_experts_impl)
    print(f"[target] {sum(p.numel() for p in target.parameters()):,} params", flush=True)
    stats = train_target(target, Windows(corpus.train_stream, args.seq_len, args.batch, args.seed + 1),
                         args.target_steps, args.target_lr, args.warmup, args.log_every, t0)
    return target, stats


def fit_draft(args: argparse.Namespace, corpus: Corpus, target, t0: float):
    """(draft, its training stats): a dense draft seeded with the target's embedding, distilled."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(args.seed + 2)
    dcfg = draft_config(corpus.tok.get_vocab_size(), args.seq_len, args.draft_layers)
    draft = Qwen3ForCausalLM._from_config(dcfg, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(target.get_input_embeddings().weight)
    print(f"[draft] {sum(p.numel() for p in draft.parameters()):,} params", flush=True)
    stats = train_draft(draft, target, Windows(corpus.train_stream, args.seq_len, args.batch, args.seed + 3),
                        args.draft_steps, args.draft_lr, args.warmup, args.alpha, args.temperature,
                        args.log_every, t0)
    return draft, stats


def measure(args: argparse.Namespace, corpus: Corpus, target, draft) -> tuple[dict, dict]:
    """(validation figures, greedy-continuation figures or {} without prompts), measured with the
    default (eager) experts kernel, as a user would load the model."""
    target.set_experts_implementation("eager")
    val = evaluate_val(target, draft, eval_windows(corpus.val_stream, args.seq_len, args.val_tokens))
    print(f"[eval] val loss target {val['target_val_loss']:.4f} draft {val['draft_val_loss']:.4f} "
          f"top1 agreement {val['top1_agreement']:.3f} | balance max/fair "
          f"{val['target_expert_balance']['max_over_fair']} dead {val['target_expert_balance']['dead_experts']}",
          flush=True)
    prompts = load_prompts(args.prompts) if args.prompts.is_dir() else []
    greedy = evaluate_greedy(target, draft, corpus.fast, prompts, args.gen_tokens) if prompts else {}
    if greedy:
        print(f"[eval] greedy continuations: agreement {greedy['top1_agreement']:.3f} "
              f"{greedy['top1_agreement_per_task']} | balance max/fair "
              f"{greedy['target_expert_balance']['max_over_fair']} dead "
              f"{greedy['target_expert_balance']['dead_experts']}", flush=True)
    return val, greedy


def save_pair(out: Path, target, draft, fast) -> None:
    """Both models as safetensors, each with the tokenizer and the special ids for generation."""
    out.mkdir(parents=True, exist_ok=True)
    for sub, mdl in (("target", target), ("draft", draft)):
        d = out / sub
        d.mkdir(parents=True, exist_ok=True)
        mdl.generation_config.pad_token_id = PAD_ID
        mdl.generation_config.bos_token_id = BOS_ID
        mdl.generation_config.eos_token_id = EOS_ID
        mdl.save_pretrained(d, safe_serialization=True)
        fast.save_pretrained(d)


def metrics(args: argparse.Namespace, command: str, corpus: Corpus, target, draft, stats: dict, t0: float) -> dict:
    """Everything `train_metrics.json` keeps: the run, both configs, sizes and the figures.

    `stats` holds target_train, draft_train, val and greedy, in that order."""
    import transformers

    tcfg = target.config
    tparams, dparams = count_params(target), count_params(draft)
    per_expert = 3 * tcfg.hidden_size * tcfg.moe_intermediate_size
    tparams["active_per_token"] = tparams["non_expert"] + tcfg.num_hidden_layers * tcfg.num_experts_per_tok * per_expert
    m = {
        "command": command,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "python": platform.python_version(),
        "stdlib_root": str(stdlib_root()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "threads": args.threads,
        "vocab_size": corpus.tok.get_vocab_size(),
        "data": corpus.counts,
        "target_config": json.loads(target.config.to_json_string()),
        "draft_config": json.loads(draft.config.to_json_string()),
        "target_params": tparams,
        "draft_params": dparams,
        "target_active_params": tparams["active_per_token"],
        "expert_bytes_fp32": per_expert * 4,
        **stats,
        "target_bytes": dir_bytes(args.out / "target"),
        "draft_bytes": dir_bytes(args.out / "draft"),
        "wall_seconds": time.time() - t0,
        "cpu_seconds": time.process_time(),  # this process, all threads (others may share the cores)
    }
    # rope_theta lives in rope_parameters in transformers 5; surface it for the card's table
    for c in (m["target_config"], m["draft_config"]):
        c.setdefault("rope_theta", (c.get("rope_parameters") or {}).get("rope_theta"))
        c.setdefault("head_dim", c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    return m


def run(args: argparse.Namespace, command: str) -> int:
    """Train, measure and save the pair into `args.out`; the card needs greedy figures (prompts)."""
    t0 = time.time()
    deterministic(args.seed, args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    corpus = prepare_data(args.max_files, args.vocab_size, t0)
    target, t_stats = fit_target(args, corpus, t0)
    draft, d_stats = fit_draft(args, corpus, target, t0)
    val, greedy = measure(args, corpus, target, draft)
    save_pair(args.out, target, draft, corpus.fast)
    stats = {"target_train": t_stats, "draft_train": d_stats, "val": val, "greedy": greedy}
    m = metrics(args, command, corpus, target, draft, stats, t0)
    (args.out / "train_metrics.json").write_text(json.dumps(m, indent=1) + "\n", encoding="utf-8")
    if greedy:
        write_card(args.out, m)
    print(f"[done] saved to {args.out} | target {m['target_bytes'] / 1e6:.2f} MB, draft "
          f"{m['draft_bytes'] / 1e6:.2f} MB | wall {fmt_time(m['wall_seconds'])}", flush=True)
    return 0
