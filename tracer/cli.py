"""`tracer`: record traces from real MoE models (`record`), build tiny test models (`tiny`), list names (`models`).

Bad input (a missing path, a bad value, an unknown name, unreachable weights) prints one line on
stderr and exits with status 2, without a traceback.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from ecosim.cli import interrupted, make_app, run
from ecosim.errors import Interrupted
from ecosim.tree_config import TREE, TreeShape
from tracer.drafts import registry as draft_kinds

_ARGV: list[str] = []  # the arguments being run, for the manifest's recorded_on.command

app = make_app("tracer", __doc__.splitlines()[0])


@app.command()
def record(
    model: Annotated[str, typer.Option(help="Target: a registry name (see `tracer models`), a local checkpoint directory "
                                            "(or a pair directory with target/ and draft/), or a Hugging Face hub id.")],
    prompts: Annotated[list[Path], typer.Option(help="JSON Lines file of prompts ({\"task\", \"text\"|\"input_ids\"} a line); "
                                                     "repeatable; a directory stands for its *.jsonl.")],
    out: Annotated[Path, typer.Option(help="Trace directory to write (see docs/TRACE_FORMAT.md).")],
    draft: Annotated[str, typer.Option(help="Draft: 'default' (the registry's, or a pair directory's draft/); "
                                            f"{draft_kinds.help_text()}; a bare PATH is model:PATH.")] = "default",
    max_new_tokens: Annotated[int, typer.Option(min=1, max=2**31 - 1, help="Positions (generated tokens) to record per prompt.")] = 64,
    depth: Annotated[int, typer.Option(min=1, max=127, help=TreeShape.help("depth"))] = TREE.depth,
    topk: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("topk"))] = TREE.topk,
    max_nodes: Annotated[int, typer.Option(min=1, max=32766, help=TreeShape.help("max_nodes"))] = TREE.max_nodes,
    chunk: Annotated[int, typer.Option(min=1, max=2**31 - 1, help="Commit the trace to disk every N positions of a request (each chunk also "
                                            "re-prefills the context, which keeps --resume bit-exact).")] = 32,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted recording in --out.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a trace already in --out.")] = False,
    dtype: Annotated[str, typer.Option(help="auto (the checkpoint's), float32, bfloat16 or float16.")] = "auto",
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, or auto (device_map=\"auto\" over all GPUs).")] = "cpu",
    attn: Annotated[str, typer.Option(help="Attention implementation: auto (eager for GPT-OSS, else sdpa), eager or sdpa.")] = "auto",
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Allow the checkpoint's own Python code "
                                                                                  "(off unless given).")] = False,
    stop_at_eos: Annotated[bool, typer.Option(help="End a request when the target's next token is end-of-sequence.")] = True,
    gates: Annotated[bool, typer.Option(help="Also write the gate weights of the routed experts.")] = True,
    max_prompts: Annotated[int | None, typer.Option(min=1, help="Use at most N prompts of each file.")] = None,
    threads: Annotated[int | None, typer.Option(min=1, max=4096, help="torch CPU threads (keep equal across --resume for bit-equal traces).")] = None,
    temperature: Annotated[float, typer.Option(min=0.0, max=100.0, help="Sampling temperature of the continuation; 0 records the greedy one. "
                                                    "At T > 0 every node's target_next is drawn with the random number of "
                                                    "the index it fills (replay stays exact under target-only verification).")] = 0.0,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling: keep the smallest set of tokens reaching this mass (with --temperature).")] = 1.0,
    sample_top_k: Annotated[int, typer.Option(min=0, max=2**31 - 1, help="Sample among the K most probable tokens (0: all; with --temperature).")] = 0,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the sampled continuation (the same seed records the same trace).")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Record a trace: a verified candidate tree at every position of the target's continuation (greedy, or sampled)."""
    from tracer.loading import DTYPES

    if dtype not in DTYPES:
        raise typer.BadParameter(f"expected one of {', '.join(DTYPES)}", param_hint="--dtype")
    if attn not in ("auto", "eager", "sdpa"):
        raise typer.BadParameter("expected auto, eager or sdpa", param_hint="--attn")
    from tracer.record import RecordConfig, run_record
    from tracer.sampler import Sampler

    cfg = RecordConfig(
        model=model, prompts=prompts, out=out, draft=draft, max_new_tokens=max_new_tokens, depth=depth, topk=topk,
        max_nodes=max_nodes, chunk=chunk, dtype=dtype, device=device, attn=attn, trust_remote_code=trust_remote_code,
        stop_at_eos=stop_at_eos, gates=gates, max_prompts=max_prompts, resume=resume, force=force, threads=threads,
        progress=not quiet, command=shlex.join(["tracer", *_ARGV]),
        sampler=Sampler(temperature, top_p, sample_top_k, seed),
    )
    try:
        path = run_record(cfg)
    except Interrupted as e:  # says what was committed and the command that resumes
        interrupted("tracer", str(e))
    print(f"wrote {path}", file=sys.stderr)


@app.command()
def tiny(
    family: Annotated[str, typer.Option(help="qwen3_moe, deepseek_v3, gpt_oss, mixtral or olmoe.")],
    out: Annotated[Path, typer.Option(help="Directory to write: target/ and draft/ checkpoints (safetensors + tokenizer).")],
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Seed of the random weights.")] = 0,
    heads: Annotated[bool, typer.Option("--heads", help="Also write a random EAGLE-3 head in OUT/eagle3 and, for "
                                                        "deepseek_v3, an MTP layer in the target's checkpoint.")] = False,
) -> None:
    """Build a tiny random model of a family (and a smaller draft) as a local checkpoint, for tests."""
    from tracer.tiny import FAMILIES, add_mtp_layer, write_eagle3, write_tiny

    if family not in FAMILIES:
        raise typer.BadParameter(f"unknown family {family!r}; known: {', '.join(FAMILIES)}", param_hint="--family")
    path = write_tiny(family, out, seed=seed)
    if heads:
        write_eagle3(path / "target", path / "eagle3", seed=seed + 2000)
        if family == "deepseek_v3":
            add_mtp_layer(path / "target", seed=seed + 3000)
    print(f"wrote {path}", file=sys.stderr)


@app.command()
def models() -> None:
    """List the registry: short name, hub id, family, default draft."""
    from tracer.registry import ENTRIES

    for e in ENTRIES:
        print(f"{e.name:16s} {e.hub_id:30s} {e.family:12s} draft={e.draft}")


def main(argv: list[str] | None = None) -> None:
    """Console entry point (ecosim.cli.run): one line on stderr and exit 2 for bad input, 130 on Ctrl-C."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _ARGV[:] = sys.argv[1:] if argv is None else argv
    code = run(app, "tracer", argv)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
