"""Train an EAGLE-3 head for the ecosim-tiny target on the target's own hidden states.

    python -m tracer.train_eagle3 --target models/ecosim-tiny/target --out models/ecosim-tiny/eagle3 \
        --cache .tmp-cache/eagle3.pt --seed 0

The target is frozen. Each step reads random windows of the training corpus (`tracer.corpus`,
tokenised with the target's tokenizer), runs the target once (its logits are the labels; its
decoder-layer outputs at `--layers` are the features) and unrolls the head `--ttt` steps, the
"training-time test" of EAGLE-3 (Li et al. 2025, section 3.3): step 1 reads the target's features,
step k reads the head's own output of step k-1 at the previous position, so the head learns from
the inputs it sees deep in a draft tree. A step-k query at position p attends to the step-1 keys at
positions <= p-k+1 (the context, as at inference) and to the step-j key at p-k+j for j = 2..k
(its ancestors in the tree and itself). Loss: cross-entropy against the target's distribution
restricted to the draft vocabulary, step k weighted 0.8^(k-1) (EAGLE-3's weighting; `--ttt-decay`). The head's
LM head and final norm start from the target's (its rows of the draft vocabulary), so the head
learns to produce a hidden state the target's read-out already understands.

With `--cache FILE` the target runs once, over `--cache-windows` windows, before training
(`tracer.feature_cache`: the same features and logits, from a git-ignored file), and each step then
costs the head alone: what makes thousands of steps affordable on one CPU thread.

The draft vocabulary is the `--draft-vocab` most frequent tokens of the training stream (d2t/t2d
map it to the target's ids). One CPU thread by default and `torch.use_deterministic_algorithms`:
the same seed gives the same head on the same machine kind and library versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tracer import feature_cache
from tracer.corpus import LICENCE, collect, split
from tracer.drafts.eagle3 import Eagle3Config, Eagle3Head
from tracer.eagle3_warm import warm_start
from tracer.feature_cache import FeatureCache, features
from tracer.routing import decoder_layers
from tracer.train_pair import Windows, encode_stream, eval_windows, fmt_time, lr_at


def draft_vocab(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The `size` most frequent target ids by `counts` (V,) (ties: lower id), ascending."""
    vocab = len(counts)
    order = sorted(range(vocab), key=lambda i: (-int(counts[i]), i))[:size]
    return torch.tensor(sorted(order), dtype=torch.long)


def shift(t: torch.Tensor, n: int) -> torch.Tensor:
    """t[:, p - n] at position p (zeros where p < n), along dim 1."""
    return t if n == 0 else torch.cat([torch.zeros_like(t[:, :n]), t[:, :-n]], 1)


def unroll(head: Eagle3Head, emb: torch.Tensor, feats: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Draft-vocab logits (B, T, V_d) of TTT steps 1..`steps` (the module docstring's attention)."""
    B, T, _ = emb.shape
    pos = torch.arange(T)
    g = shift(head.fc(feats), 1)  # step 1: the target's feature of position p-1
    keys: list[tuple[torch.Tensor, torch.Tensor]] = []
    out = []
    idx = torch.arange(T)
    for k in range(1, steps + 1):
        q, kk, v = head.qkv(emb, g, pos)  # (B, T, heads, d)
        keys.append((kk, v))
        rep = q.shape[2] // kk.shape[2]
        k1, v1 = (t.repeat_interleave(rep, 2) for t in keys[0])
        s1 = torch.einsum("bqhd,bkhd->bhqk", q, k1) / q.shape[-1] ** 0.5
        s1 = s1.masked_fill(~(idx[None, :] <= idx[:, None] - (k - 1)), float("-inf"))  # step-1 keys <= p-k+1
        diag, vals = [], []
        for j in range(2, k + 1):
            kj, vj = (shift(t, k - j).repeat_interleave(rep, 2) for t in keys[j - 1])
            sj = (q * kj).sum(-1).transpose(1, 2) / q.shape[-1] ** 0.5  # (B, heads, T)
            diag.append(sj.masked_fill(idx[None, None, :] < k - j, float("-inf")))
            vals.append(vj)
        s = torch.cat([s1] + [d[..., None] for d in diag], -1).softmax(-1).nan_to_num(0.0)
        a = torch.einsum("bhqk,bkhd->bqhd", s[..., :T], v1)
        for j, vj in enumerate(vals):
            a = a + s[..., T + j].transpose(1, 2)[..., None] * vj
        logits, h = head.finish(g, a.flatten(2))
        out.append(logits)
        g = shift(h, 1)  # step k+1 reads this step's output of position p-1
    return out


def ttt_loss(head, emb, feats, t_logits, ids, steps: int, decay: float = 0.8) -> tuple[torch.Tensor, list[float]]:
    """EAGLE-3's loss over the unrolled steps (step k weighted decay^(k-1)); also each step's top-1
    agreement with the target."""
    tp = t_logits[..., ids].float().softmax(-1)
    t_top = t_logits.argmax(-1)
    total, acc, wsum = 0.0, [], 0.0
    for k, logits in enumerate(unroll(head, emb, feats, steps), start=1):
        valid = slice(k, None)  # a step-k query needs k earlier positions
        ce = -(tp[:, valid] * F.log_softmax(logits[:, valid].float(), -1)).sum(-1).mean()
        w = decay ** (k - 1)
        total, wsum = total + w * ce, wsum + w
        acc.append(float((ids[logits[:, valid].argmax(-1)] == t_top[:, valid]).float().mean()))
    return total / wsum, acc


def agreement(head: Eagle3Head, embed, batches, ids: torch.Tensor, steps: int) -> list[float]:
    """Top-1 agreement with the target per TTT step over `batches` of (tokens, target logits, features)."""
    was = head.training
    head.eval()
    tot, n = [0.0] * steps, 0
    with torch.no_grad():
        for x, t_logits, feats in batches:
            _, acc = ttt_loss(head, embed(x), feats, t_logits, ids, steps)
            tot, n = [a + b * len(x) for a, b in zip(tot, acc)], n + len(x)
    head.train(was)
    return [round(a / n, 4) for a in tot]


def save_head(head: Eagle3Head, out: Path) -> None:
    """config.json + model.safetensors under the public names (what `--draft eagle3:PATH` loads)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(head.cfg.to_json(), indent=2) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, default=Path("models/ecosim-tiny/target"), help="target checkpoint directory")
    ap.add_argument("--out", type=Path, default=Path("models/ecosim-tiny/eagle3"), help="head directory to write")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the data windows")
    ap.add_argument("--steps", type=int, default=900, help="optimiser steps")
    ap.add_argument("--batch", type=int, default=4, help="windows per step")
    ap.add_argument("--seq-len", type=int, default=256, help="tokens per window")
    ap.add_argument("--ttt", type=int, default=3, help="training-time-test steps unrolled")
    ap.add_argument("--ttt-decay", type=float, default=0.8,
                    help="loss weight of TTT step k is DECAY^(k-1) (EAGLE-3's 0.8); nearer 1 weights the deep steps a "
                         "deep tree accepts from more evenly")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW, cosine to 10%)")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up steps")
    ap.add_argument("--draft-vocab", type=int, default=1024, help="draft vocabulary size")
    ap.add_argument("--intermediate", type=int, default=512, help="MLP width of the head")
    ap.add_argument("--layers", default="0,2,3", help="target layers whose outputs are the low, mid, high features")
    ap.add_argument("--init-head", action=argparse.BooleanOptionalAction, default=True,
                    help="initialise the head's LM head and final norm from the target's (rows of the draft vocabulary)")
    ap.add_argument("--init", type=Path, default=None,
                    help="warm-start from this head directory (config.json + model.safetensors, e.g. the committed "
                         "models/ecosim-tiny/eagle3): its weights replace the fresh ones, under this run's schedule; "
                         "its layers and attention must be this run's; a wider --intermediate and a --draft-vocab that "
                         "holds its vocabulary grow it, computing what it did (tracer/eagle3_warm.py)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--val-tokens", type=int, default=16384, help="validation tokens for the final agreement")
    ap.add_argument("--log-every", type=int, default=25, help="print every N steps")
    ap.add_argument("--cache", type=Path, default=None,
                    help="feature cache file (git-ignored scratch, e.g. .tmp-cache/eagle3.pt): built on first use, then "
                         "training reads it and never runs the target or reads the corpus (tracer/feature_cache.py)")
    ap.add_argument("--cache-windows", type=int, default=4096, help="windows of --seq-len tokens the cache holds")
    ap.add_argument("--cache-dtype", choices=["float16", "float32"], default="float16", help="dtype of the cached features")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="every N steps, print the top-1 agreement per TTT step on held-out validation text (0: never)")
    ap.add_argument("--eval-tokens", type=int, default=4096, help="held-out tokens of the periodic evaluation")
    args = ap.parse_args(argv)

    t0 = time.time()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32, use_safetensors=True).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    V = int(target.config.vocab_size)
    layers = [int(i) for i in args.layers.split(",")]
    log = lambda m: print(f"{m} | {fmt_time(time.time() - t0)}", flush=True)  # noqa: E731
    if args.cache is None or not args.cache.is_file():
        tok = AutoTokenizer.from_pretrained(args.target)
        train_docs, val_docs = split(collect())
        train = encode_stream(tok.backend_tokenizer, [d.text for d in train_docs])
        val = encode_stream(tok.backend_tokenizer, [d.text for d in val_docs])
        counts = torch.bincount(train, minlength=V)
        if args.cache is not None:
            feature_cache.build(target, layers, train, args.cache_windows, args.seq_len, args.seed + 2, args.cache,
                                getattr(torch, args.cache_dtype), extra={"counts": counts, "val": val}, log=log)
            log(f"[cache] wrote {args.cache} ({args.cache.stat().st_size / 1e9:.2f} GB)")
    cache = FeatureCache(args.cache, target, layers) if args.cache is not None else None
    if cache is not None:
        counts, val = cache.extra["counts"], cache.extra["val"]
    ids = draft_vocab(counts, args.draft_vocab)
    coverage = float(counts[ids].sum() / counts.sum())
    log(f"[data] train {int(counts.sum()):,} tokens{f' ({len(cache) * args.seq_len:,} cached)' if cache else ''}, "
        f"val {len(val):,}; draft vocab {len(ids)} covers {coverage:.4f} of training tokens")

    tc = target.config
    cfg = Eagle3Config(
        hidden_size=tc.hidden_size, target_hidden_size=tc.hidden_size, intermediate_size=args.intermediate,
        num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
        head_dim=tc.hidden_size // tc.num_attention_heads, vocab_size=V, draft_vocab_size=len(ids),
        layer_ids=layers, rms_norm_eps=tc.rms_norm_eps, rope_theta=float(tc.rope_parameters["rope_theta"]),
    )
    torch.manual_seed(args.seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        if args.init_head:  # start from the target's own read-out: its final norm and LM-head rows
            head.lm_head.weight.copy_(target.get_output_embeddings().weight[ids])
            head.norm.weight.copy_(target.model.norm.weight)
        head.d2t.copy_(ids - torch.arange(len(ids)))
        head.t2d.zero_()
        head.t2d[ids] = True
    if args.init is not None:
        warm_start(head, args.init, target)
    n_params = sum(p.numel() for p in head.parameters())
    print(f"[head] {n_params:,} params, layers {layers}, TTT {args.ttt} | {fmt_time(time.time() - t0)}", flush=True)
    embed = target.get_input_embeddings()
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    windows = Windows(train, args.seq_len - 1, args.batch, args.seed + 1) if cache is None else None  # seq_len tokens
    pick = torch.Generator().manual_seed(args.seed + 1)
    vw = eval_windows(val, args.seq_len - 1, args.val_tokens)
    held = [(x, *features(target, layers, x)) for x in vw[:max(1, args.eval_tokens // args.seq_len)].split(args.batch)]
    losses, accs = [], []
    for step in range(args.steps):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        if cache is None:
            x = windows.next()
            t_logits, feats = features(target, layers, x)
        else:
            x, t_logits, feats = cache.batch(torch.randint(0, len(cache), (args.batch,), generator=pick))
        with torch.no_grad():
            emb = embed(x)
        loss, acc = ttt_loss(head, emb, feats, t_logits, ids, args.ttt, args.ttt_decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        accs.append(acc)
        if (step + 1) % args.log_every == 0 or step == 0:
            a = [round(sum(v[k] for v in accs[-args.log_every:]) / len(accs[-args.log_every:]), 3) for k in range(args.ttt)]
            log(f"[train] step {step + 1}/{args.steps} loss {sum(losses[-args.log_every:]) / len(losses[-args.log_every:]):.4f} "
                f"top-1 agreement per step {a}")
        if args.eval_every and (step + 1) % args.eval_every == 0:
            log(f"[held-out] step {step + 1}: top-1 agreement per TTT step {agreement(head, embed, held, ids, args.ttt)}")
            save_head(head, args.out / "partial")  # a usable head if the run is stopped early
    train_s = time.time() - t0

    full = [(x, *features(target, layers, x)) for x in vw.split(args.batch)]
    agree = agreement(head, embed, full, ids, args.ttt)
    log(f"[eval] validation top-1 agreement per TTT step {agree}")

    save_head(head, args.out)
    metrics = {
        "command": "python -m tracer.train_eagle3 " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seed": args.seed, "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "ttt": args.ttt,
        "ttt_decay": args.ttt_decay,
        "lr": args.lr, "warmup": args.warmup, "init_head_from_target": args.init_head,
        "init": None if args.init is None else str(args.init), "threads": args.threads, "params": n_params,
        "bytes": sum(t.numel() * t.element_size() for t in head.state_dict().values()),
        "draft_vocab": len(ids), "draft_vocab_coverage_train": round(coverage, 4), "layers": layers,
        "final_train_loss_last50": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "val_top1_agreement_per_step": agree, "val_tokens": int(vw[:, :].numel()),
        "wall_s": round(time.time() - t0, 1), "train_wall_s": round(train_s, 1),
        "feature_cache": None if cache is None else {"windows": len(cache), "dtype": args.cache_dtype},
        "torch": torch.__version__, "licence_of_training_text": LICENCE,
    }
    (args.out / "train_metrics.json").write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    print(f"[done] wrote {args.out} ({metrics['bytes']:,} bytes) | {fmt_time(time.time() - t0)}", flush=True)
    return 0


if __name__ == "__main__":
    from tracer.errors import TracerError

    try:
        raise SystemExit(main())
    except TracerError as e:  # one line, exit 2 (the house rule for errors a user can fix)
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2)
