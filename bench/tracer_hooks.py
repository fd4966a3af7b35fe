"""What router capture costs: one verification forward with the hooks on vs off, and the ratio.

    bench/run --only tracer          (or: python -m bench.tracer_hooks [--family qwen3_moe] [--repeats 200])

A tiny random model of the family (4 layers, hidden 256, 16 experts top-2, fp32, the size NOTES.md
times), a 128-token context in the KV cache, and a 16-node candidate tree (depth 3). "on" is what
`tracer record` runs: the forward with every router hooked and capturing, plus `collect()` (the one
host transfer of the step's routing); registering and removing the hooks is inside the timing too,
which only makes "on" look worse. "off" is the same forward with no hooks. The two alternate
forward by forward so that machine load hits both alike; both crop the cache back afterwards. Reported: median and 10th/90th percentile milliseconds.
Not a test: numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.common import Report


def build(family: str, device: str):
    import transformers as tf

    from tracer.tiny import attn_for, tiny_config

    cfg = tiny_config(family)
    over = dict(hidden_size=256, num_hidden_layers=4)
    key = {"qwen3_moe": "num_experts", "olmoe": "num_experts", "deepseek_v3": "n_routed_experts"}.get(family, "num_local_experts")
    over[key] = 16
    over["num_experts_per_tok"] = 2
    for k, v in over.items():
        setattr(cfg, k, v)
    if family == "deepseek_v3":
        cfg.first_k_dense_replace, cfg.n_group, cfg.topk_group = 0, 1, 1
    if family == "gpt_oss":
        cfg.layer_types = ["sliding_attention", "full_attention"] * 2
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_for(family), dtype=torch.float32).to(device).eval()


def timed_pair(on, off, repeats: int, sync) -> tuple[list[float], list[float]]:
    """Alternate the two settings forward by forward, so drifting machine load hits both alike."""
    for _ in range(10):
        on()
        off()
    t_on, t_off = [], []
    for _ in range(repeats):
        for fn, acc in ((on, t_on), (off, t_off)):
            sync()
            t = time.perf_counter()
            fn()
            sync()
            acc.append((time.perf_counter() - t) * 1e3)
    return t_on, t_off


def measure(family: str = "qwen3_moe", device: str = "cpu", repeats: int = 200, threads: int = 1) -> dict[str, float]:
    """Median, 10th and 90th percentile milliseconds of the forward with hooks on and off."""
    torch.set_num_threads(threads)

    from tracer.routing import RouterCapture
    from tracer.runner import CachedLM
    from tracer.tree import Tree

    import numpy as np

    model = build(family, device)
    lm = CachedLM(model)
    g = torch.Generator().manual_seed(0)
    lm.extend(torch.randint(3, 259, (128,), generator=g))
    ctx = len(lm)
    # 16 nodes: root, 3 children, 12 grandchildren (4 under each child)
    parents = np.array([-1, 0, 0, 0] + [1 + i // 4 for i in range(12)], np.int64)
    depths = np.array([0, 1, 1, 1] + [2] * 12, np.int64)
    tree = Tree(torch.randint(3, 259, (16,), generator=g).numpy(), parents, depths, np.zeros(16, np.float32))
    anc, pos, ids = tree.ancestors(), torch.from_numpy(depths) + ctx, torch.from_numpy(tree.tokens)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    cap = RouterCapture(model)
    cap.remove()

    def on() -> None:  # hooks registered and capturing, then the step's one host transfer
        cap._handles = [r.register_forward_hook(cap._hook(i)) for i, r in cap.routers]
        with cap.capture():
            lm.forward(ids, pos, anc, ctx)
        cap.collect()
        cap.remove()
        lm.keep(ctx)

    def off() -> None:  # the same forward, no hooks at all
        lm.forward(ids, pos, anc, ctx)
        lm.keep(ctx)

    t_on, t_off = timed_pair(on, off, repeats, sync)
    out = {"moe_layers": float(len(cap.moe_layers)), "threads": float(torch.get_num_threads())}
    for name, xs in (("on", t_on), ("off", t_off)):
        out[f"{name}_ms"] = statistics.median(xs)
        out[f"{name}_p10_ms"], out[f"{name}_p90_ms"] = float(np.percentile(xs, 10)), float(np.percentile(xs, 90))
    out["ratio"] = out["on_ms"] / out["off_ms"]
    return out


def run(report: Report, quick: bool) -> None:
    repeats = 20 if quick else 200
    m = measure(repeats=repeats)
    b = "tracer"
    note = f"tiny qwen3_moe ({m['moe_layers']:.0f} MoE layers, hidden 256, 16 experts top-2), 16-node tree, 128-token context"
    report.add(b, "hooks_on_ms", m["on_ms"], "ms", note=f"median of {repeats}; p10 {m['on_p10_ms']:.3f}, p90 {m['on_p90_ms']:.3f}")
    report.add(b, "hooks_off_ms", m["off_ms"], "ms", note=f"median of {repeats}; p10 {m['off_p10_ms']:.3f}, p90 {m['off_p90_ms']:.3f}")
    report.add(b, "on_over_off", m["ratio"], "x", note=note + f", cpu, {m['threads']:.0f} thread")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_moe", help="model family of the tiny target")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--repeats", type=int, default=200, help="timed forwards per setting")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    m = measure(args.family, args.device, args.repeats, args.threads)
    print(f"{args.family}, {args.device}, {m['threads']:.0f} threads: 16-node tree over a 128-token context, "
          f"{m['moe_layers']:.0f} MoE layers, {args.repeats} forwards each")
    for name in ("on", "off"):
        print(f"  hooks {name:<3}: median {m[name + '_ms']:.3f} ms  (p10 {m[name + '_p10_ms']:.3f}, p90 {m[name + '_p90_ms']:.3f})")
    print(f"  ratio on/off (medians): {m['ratio']:.3f}")


if __name__ == "__main__":
    main()
