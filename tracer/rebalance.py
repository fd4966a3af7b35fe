"""Second training stage of the default pair: spread the target's experts within every sequence.

    python -m tracer.rebalance --model models/ecosim-tiny --seed 0

`tracer.train_pair` balances each layer's experts over a *batch* (Switch-style). That leaves the
model free to specialise experts by domain: prose to a few experts, code to others. The traces
record one task kind at a time, so a domain-specialised expert takes several times its fair share
of a trace (dialogue: 5.4x on the first weights) though the batch-level figure looks fine (2.1x).

This stage continues training the target for a few hundred steps on the same corpus with, added
to the next-token and batch-balance losses, a *sequence-wise* balance loss (DeepSeek-V3's
complementary loss: the Switch loss computed over each sequence on its own and averaged), then
re-distils the draft against the changed target for a few hundred steps so that they still agree.
It rewrites both models in place, records its settings and figures under `rebalance` in
`train_metrics.json`, and re-renders the model card (`tracer.training.card`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from tracer.corpus import collect, split
from tracer.training.card import write_card
from tracer.training.config import PAD_ID
from tracer.training.data import Windows, encode_stream, eval_windows, load_prompts
from tracer.training.distill import train_draft
from tracer.training.log import fmt_time
from tracer.training.measure import evaluate_greedy, evaluate_val
from tracer.training.pipeline import deterministic
from tracer.training.target_loop import train_target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracer.rebalance", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=Path("models/ecosim-tiny"), help="pair directory (target/ + draft/), rewritten in place")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-steps", type=int, default=600, help="fine-tuning steps of the target")
    ap.add_argument("--draft-steps", type=int, default=300, help="re-distillation steps of the draft")
    ap.add_argument("--target-lr", type=float, default=5e-4)
    ap.add_argument("--draft-lr", type=float, default=1e-3)
    ap.add_argument("--seq-balance-coef", type=float, default=1.0, help="weight of the sequence-wise balance loss")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (one is the faster where other work shares the cores)")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--gen-tokens", type=int, default=160,
                    help="greedy tokens per prompt for the measurements (what the committed traces record)")
    ap.add_argument("--dry-run", action="store_true", help="train and measure, but write nothing")
    args = ap.parse_args(argv)

    import transformers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    transformers.logging.set_verbosity_error()
    t0 = time.time()
    deterministic(args.seed, args.threads)
    metrics_path = args.model / "train_metrics.json"
    m = json.loads(metrics_path.read_text(encoding="utf-8"))
    base = m["args"]
    fast = PreTrainedTokenizerFast.from_pretrained(args.model / "target")
    train_docs, val_docs = split(collect(base.get("max_files")))
    train_stream = encode_stream(fast.backend_tokenizer, [d.text for d in train_docs])
    val_stream = encode_stream(fast.backend_tokenizer, [d.text for d in val_docs])
    target = AutoModelForCausalLM.from_pretrained(args.model / "target", output_router_logits=False, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(args.model / "draft", dtype=torch.float32)
    seq_len, batch = base["seq_len"], base["batch"]
    prompts = load_prompts(Path(base["prompts"]))
    before = evaluate_greedy(target, draft, fast, prompts, args.gen_tokens)
    print(f"[before] greedy balance per task {before['target_expert_balance_per_task']}", flush=True)

    t_stats = train_target(target, Windows(train_stream, seq_len, batch, args.seed + 11), args.target_steps,
                           args.target_lr, max(1, args.target_steps // 10), args.log_every, t0,
                           seq_coef=args.seq_balance_coef, label="rebalance")
    d_stats = train_draft(draft, target, Windows(train_stream, seq_len, batch, args.seed + 13), args.draft_steps,
                          args.draft_lr, max(1, args.draft_steps // 10), base["alpha"], base["temperature"],
                          args.log_every, t0)
    val = evaluate_val(target, draft, eval_windows(val_stream, seq_len, base["val_tokens"]))
    greedy = evaluate_greedy(target, draft, fast, prompts, args.gen_tokens)
    print(f"[eval] val loss target {val['target_val_loss']:.4f} draft {val['draft_val_loss']:.4f} | greedy "
          f"agreement {greedy['top1_agreement']:.3f} {greedy['top1_agreement_per_task']} | balance max/fair "
          f"{greedy['target_expert_balance']['max_over_fair']} per task "
          f"{greedy.get('target_expert_balance_per_task')}", flush=True)
    if args.dry_run:
        return 0
    target.config.output_router_logits = False  # a tree-masked forward fails with it on
    for sub, mdl in (("target", target), ("draft", draft)):
        mdl.generation_config.pad_token_id = PAD_ID
        mdl.save_pretrained(args.model / sub, safe_serialization=True)
    m["rebalance"] = {
        "command": "python -m tracer.rebalance " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "before": {"val": m["val"], "greedy": before},
        "target_train": t_stats,
        "draft_train": d_stats,
        "wall_seconds": time.time() - t0,
    }
    m["val"], m["greedy"] = val, greedy
    metrics_path.write_text(json.dumps(m, indent=1) + "\n", encoding="utf-8")
    write_card(args.model, m)
    print(f"[done] rewrote {args.model} | wall {fmt_time(time.time() - t0)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
