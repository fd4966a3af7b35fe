"""`validate sampling-check`, the command (validate/sampling_check.py does the work; torch loads only when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ecosim.errors import EcoSimError
from ecosim.tree_config import TreeShape

from validate.sampling_config import SamplingCheck

DEFAULTS = SamplingCheck()
helptext = SamplingCheck.help


def sampling_check(
    model: Annotated[str, typer.Option(help="Target: a pair directory (target/ and draft/), a checkpoint directory, a registry name or a hub id.")],
    prompts: Annotated[list[Path], typer.Option(help="JSON Lines prompt files (tracer record's format); repeatable.")],
    draft: Annotated[str, typer.Option(help="Draft: 'default' (the pair's draft/ or the registry's), 'early-exit:N', a directory or a hub id.")] = "default",
    max_prompts: Annotated[int, typer.Option(min=1, help="Use at most N prompts of each file.")] = 1,
    samples: Annotated[int, typer.Option(min=1, max=10_000_000, help=helptext("samples"))] = DEFAULTS.samples,
    tokens: Annotated[int, typer.Option(min=1, max=64, help=helptext("tokens"))] = DEFAULTS.tokens,
    temperature: Annotated[float, typer.Option(min=0.0, max=100.0, help=helptext("temperature"))] = DEFAULTS.temperature,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help=helptext("top_p"))] = DEFAULTS.top_p,
    sample_top_k: Annotated[int, typer.Option(min=0, max=2**31 - 1, help=helptext("top_k"))] = DEFAULTS.top_k,
    seed: Annotated[int, typer.Option(min=0, max=2**31, help=helptext("seed"))] = DEFAULTS.seed,
    alpha: Annotated[float, typer.Option(min=0.0, max=1.0, help=helptext("alpha"))] = DEFAULTS.alpha,
    min_count: Annotated[int, typer.Option(min=1, max=1_000_000, help=helptext("min_count"))] = DEFAULTS.min_count,
    depth: Annotated[int, typer.Option(min=1, max=127, help=TreeShape.help("depth"))] = DEFAULTS.tree.depth,
    topk: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("topk"))] = DEFAULTS.tree.topk,
    max_nodes: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("max_nodes"))] = DEFAULTS.tree.max_nodes,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")] = "cpu",
    threads: Annotated[int | None, typer.Option(min=1, max=4096, help="torch CPU threads.")] = 1,
) -> None:
    """Test that speculative decoding at T > 0 samples the target's distribution: the first few tokens of each
    prompt drawn plainly and with speculation (independent seeds), compared by a chi-square test of homogeneity.

    Exit status: 0 the test passed (p >= --alpha); 1 the distributions differ (p < --alpha); 2 bad input.
    """
    from validate.run_config import check_one_device
    from validate.sampling_check import prompt_ids, report, run_check

    cfg = SamplingCheck(samples=samples, tokens=tokens, temperature=temperature, top_p=top_p, top_k=sample_top_k,
                        seed=seed, alpha=alpha, min_count=min_count,
                        tree=TreeShape(depth=depth, topk=topk, max_nodes=max_nodes))
    cfg.check()
    missing = [p for p in prompts if not p.exists()]
    if missing:
        raise EcoSimError(f"--prompts {missing[0]}: no such file or directory")
    check_one_device(device)
    import torch

    from tracer.pair import load_pair

    if threads is not None:
        torch.set_num_threads(threads)
    pair = load_pair(model, draft, device=device)
    ids = prompt_ids(pair, prompts, max_prompts)
    out = run_check(pair, ids, cfg)
    for line in report(cfg, out, len(ids)):
        print(line)
    if not out.passed:
        raise typer.Exit(1)
