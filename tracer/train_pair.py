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
import sys
from pathlib import Path

# Re-exported: tracer.rebalance, tracer.train_eagle3 and the tests import these from here.
from tracer.training.balance import per_layer_balance_loss, sequence_balance_loss
from tracer.training.card import write_card
from tracer.training.config import BOS_ID, EOS_ID, PAD_ID, SPECIALS, draft_config, target_config
from tracer.training.data import Windows, encode_stream, eval_windows, load_prompts, train_tokenizer
from tracer.training.distill import train_draft
from tracer.training.log import fmt_time
from tracer.training.measure import ExpertCounter, count_params, dir_bytes, evaluate_greedy, evaluate_val
from tracer.training.pipeline import run
from tracer.training.schedule import lr_at, make_optimizer
from tracer.training.target_loop import train_target

__all__ = [
    "BOS_ID", "EOS_ID", "PAD_ID", "SPECIALS", "ExpertCounter", "Windows", "count_params", "dir_bytes",
    "draft_config", "encode_stream", "eval_windows", "evaluate_greedy", "evaluate_val", "fmt_time",
    "load_prompts", "lr_at", "main", "make_optimizer", "parser", "per_layer_balance_loss",
    "sequence_balance_loss", "target_config", "train_draft", "train_target", "train_tokenizer", "write_card",
]


def parser() -> argparse.ArgumentParser:
    """The command line; every option is recorded in train_metrics.json under `args`."""
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
    return ap


def main(argv=None) -> int:
    """Train the pair (or, with --card-only, re-render its card); the exit status."""
    args = parser().parse_args(argv)
    if args.card_only:
        m = json.loads((args.out / "train_metrics.json").read_text(encoding="utf-8"))
        write_card(args.out, m)
        print(f"[card] rewrote {args.out / 'MODEL_CARD.md'} from train_metrics.json ({m['command']})")
        return 0
    if args.steps is not None:
        args.target_steps = args.draft_steps = args.steps
    args.warmup = min(args.warmup, max(1, args.target_steps // 10), max(1, args.draft_steps // 10))
    return run(args, "python -m tracer.train_pair " + " ".join(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
