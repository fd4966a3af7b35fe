"""The recording loop: a verified candidate tree at every position of the continuation (greedy, or sampled at
T > 0 with the common random numbers of sampler.py, so that it replays exactly).

For each request: prefill the prompt; the prefill's argmax is the root at position 0. At every
position, the draft expands a tree from the root (`tree.expand_tree`), the target verifies it in
one forward (`verify.verify_tree`), its nodes are recorded, and the root's `target_next` becomes
the next root (so the trace follows the target's greedy continuation, and continuity holds).

Crash safety: every `chunk` positions of a request (and at its end) the whole trace is rewritten
atomically through `ecosim.trace.write_trace`, with each request's `positions` = what is committed,
so a kill at any moment leaves a valid trace. `--resume` reads it back and continues. To make a
resumed run equal an uninterrupted one bit for bit, both caches are rebuilt from the committed
tokens at the start of every chunk (a prefill of prompt + roots): the computation of a position
then depends only on what the trace holds, never on whether the process was restarted.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ecosim.errors import EcoSimError
from ecosim.outputs import TRACE, check_output
from ecosim.tree_config import TREE
from ecosim.trace.io import Trace, read_trace, write_trace
from ecosim.trace.schema import MANIFEST, POSITION_COLUMNS, empty_nodes, empty_positions, experts_width, typed_nodes
from tracer.drafts.cost import with_levels
from tracer.errors import Interrupted, TracerError
from tracer.loading import check_device
from tracer.pair import Pair, load_pair
from tracer.progress import progress_bar
from tracer.prompts import read_prompts, tokenize
from tracer.sampler import Sampler
from tracer.tree import expand_tree
from tracer.verify import verify_tree

# Test hook (tests/test_faults_kills.py): "N" sends this process SIGKILL right after its N-th commit,
# "N:SIGINT" a Ctrl-C, so a test can interrupt at a point that does not depend on the machine's
# speed. Unset in normal use.
KILL_AFTER_COMMIT = "TRACER_TEST_KILL_AFTER_COMMIT"


@dataclass(frozen=True)
class RecordConfig:
    """Everything `tracer record` takes; the fields in `options()` must match to resume."""

    model: str
    prompts: list[Path]
    out: Path
    draft: str = "default"
    max_new_tokens: int = 64
    depth: int = TREE.depth
    topk: int = TREE.topk
    max_nodes: int = TREE.max_nodes
    chunk: int = 32
    dtype: str = "auto"
    device: str = "cpu"
    attn: str = "auto"
    trust_remote_code: bool = False
    stop_at_eos: bool = True
    gates: bool = True
    max_prompts: int | None = None
    resume: bool = False
    force: bool = False
    threads: int | None = None
    progress: bool = True
    command: str = ""
    sampler: Sampler = Sampler()  # temperature 0: the greedy continuation

    def options(self) -> dict[str, Any]:
        keys = ("model", "draft", "max_new_tokens", "depth", "topk", "max_nodes", "chunk", "dtype", "attn",
                "stop_at_eos", "gates", "max_prompts")
        out = {k: getattr(self, k) for k in keys}
        if not self.sampler.greedy:  # absent at T = 0: greedy recordings resume as before
            out["decoding"] = self.sampler.decoding()
        return out

    def check(self) -> None:
        """Bad values fail before any model is loaded."""
        for name, v, lo, hi in (("--max-new-tokens", self.max_new_tokens, 1, 2**31 - 1), ("--depth", self.depth, 1, 127),
                                ("--topk", self.topk, 1, 32766), ("--max-nodes", self.max_nodes, 1, 32766),
                                ("--chunk", self.chunk, 1, 2**31 - 1)):
            if not lo <= v <= hi:
                raise TracerError(f"{name} {v}: must be in [{lo}, {hi}]")
        if self.threads is not None and self.threads < 1:
            raise TracerError(f"--threads {self.threads}: must be at least 1")
        if self.max_prompts is not None and self.max_prompts < 1:
            raise TracerError(f"--max-prompts {self.max_prompts}: must be at least 1")
        if self.resume and self.force:
            raise TracerError("--resume and --force exclude each other")
        if (why := self.sampler.problem()) is not None:
            raise TracerError(why)
        try:
            check_output(self.out, TRACE, force=self.force, resume=self.resume, can_resume=True)
        except EcoSimError as e:
            raise TracerError(str(e)) from None


class Recording:
    """The trace being written: committed rows, rows since the last commit, and the manifest."""

    def __init__(self, out: Path, manifest: dict[str, Any], gates: bool):
        self.out, self.manifest, self.gates = out, manifest, gates
        self.width = experts_width(manifest["model"])
        self.positions: list[dict[str, np.ndarray]] = []
        self.nodes: list[dict[str, np.ndarray]] = []
        self.counts = {r["request_id"]: 0 for r in manifest["requests"]}
        self.roots: dict[int, list[int]] = {r["request_id"]: [] for r in manifest["requests"]}
        self.last_next: dict[int, int] = {}
        self.commits = 0  # commits by this process
        self.committed = 0  # positions on disk after the last commit

    def add(self, rid: int, pos: int, context_len: int, tree: Any, ver: Any) -> None:
        n = len(tree)
        self.positions.append({k: np.array([v], t.to_pandas_dtype()) for (k, t), v in
                               zip(POSITION_COLUMNS.items(), (rid, pos, context_len, n))})
        cols = {"request_id": np.full(n, rid), "pos": np.full(n, pos), "node": np.arange(n), "parent": tree.parents,
                "depth": tree.depths, "token": tree.tokens, "draft_logprob": tree.draft_logprob,
                "target_next": ver.target_next, "target_logprob": ver.target_logprob, "experts": ver.experts}
        if self.gates:
            cols["gates"] = ver.gates
        self.nodes.append(typed_nodes(cols, self.width))
        self.counts[rid] = pos + 1
        self.roots[rid].append(int(tree.tokens[0]))
        self.last_next[rid] = int(ver.target_next[0])

    def _merged(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        if self.positions:
            pos = {k: np.concatenate([p[k] for p in self.positions]) for k in self.positions[0]}
            nodes = {k: np.concatenate([p[k] for p in self.nodes]) for k in self.nodes[0]}
            self.positions, self.nodes = [pos], [nodes]  # merged once, reused by the next commit
            return pos, nodes
        return empty_positions(), empty_nodes(self.width, self.gates)

    def commit(self, complete: bool = False) -> None:
        """Rewrite the whole trace atomically with every position recorded so far."""
        for r in self.manifest["requests"]:
            r["positions"] = self.counts[r["request_id"]]
        self.manifest["recorded_on"]["complete"] = complete
        self.manifest["recorded_on"]["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        pos, nodes = self._merged()
        write_trace(self.out, self.manifest, pos, nodes)
        self.commits += 1
        self.committed = sum(self.counts.values())
        n, _, sig = os.environ.get(KILL_AFTER_COMMIT, "").partition(":")
        if n == str(self.commits):
            os.kill(os.getpid(), getattr(signal, sig or "SIGKILL"))

    def load(self, tr: Trace) -> None:
        """Take over the committed rows of an earlier, interrupted recording."""
        if len(tr.nodes["node"]):
            nodes = dict(tr.nodes)
            if not self.gates:
                nodes.pop("gates", None)
            self.positions, self.nodes = [dict(tr.positions)], [nodes]
        self.counts = {r["request_id"]: int(r["positions"]) for r in tr.manifest["requests"]}
        root_rows = tr.nodes["node"] == 0
        for rid in self.roots:
            mine = root_rows & (tr.nodes["request_id"] == rid)
            self.roots[rid] = tr.nodes["token"][mine].astype(np.int64).tolist()
            if mine.any():
                self.last_next[rid] = int(tr.nodes["target_next"][mine][-1])


def _manifest(cfg: RecordConfig, pair: Pair, prompts: list[Any], prompt_ids: list[list[int]]) -> dict[str, Any]:
    import transformers

    dev = pair.target.device
    return {
        "synthetic": False,
        "model": pair.shape.to_manifest(),
        "draft": with_levels(pair.draft_info, cfg.depth, cfg.topk),
        "tree": {"depth": cfg.depth, "topk": cfg.topk, "max_nodes": cfg.max_nodes},
        "decoding": cfg.sampler.decoding(),
        "requests": [
            {"request_id": i, "task": p.task, "prompt_ids": ids, "positions": 0}
            for i, (p, ids) in enumerate(zip(prompts, prompt_ids))
        ],
        "recorded_on": {
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{dev.type} ({platform.processor() or platform.machine()})",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "threads": torch.get_num_threads(),
            "dtype": str(pair.target.dtype).removeprefix("torch."), "date": "", "command": cfg.command,
            "options": cfg.options(), "complete": False,
        },
    }


def _check_resumable(old: dict[str, Any], new: dict[str, Any], path: Path) -> None:
    """The trace at `path` must come from the same options, model and prompts."""
    was = old.get("recorded_on", {}).get("options", {})
    for k, v in new["recorded_on"]["options"].items():
        if was.get(k) != v:
            raise TracerError(f"--resume: {path} was recorded with {k}={was.get(k)!r}, not {v!r}")
    if old["model"] != new["model"]:
        raise TracerError(f"--resume: {path} was recorded from a different target model")
    if old["draft"] != new["draft"] or old["tree"] != new["tree"]:
        raise TracerError(f"--resume: {path} was recorded with a different draft or tree")
    strip = lambda rs: [(r["request_id"], r["task"], r.get("prompt_ids")) for r in rs]  # noqa: E731
    if strip(old["requests"]) != strip(new["requests"]):
        raise TracerError(f"--resume: {path} holds other prompts than --prompts gives")


def record_request(pair: Pair, rec: Recording, cfg: RecordConfig, rid: int, prompt: list[int], advance: Any) -> None:
    """Record request `rid` from its committed position on, committing every `cfg.chunk` positions."""
    pos = start = rec.counts[rid]
    roots = rec.roots[rid]
    root = rec.last_next.get(rid, -1)
    while pos < cfg.max_new_tokens:
        if pos == start or pos % cfg.chunk == 0:  # rebuild both caches from what the trace holds
            for lm in (pair.target, pair.draft):
                lm.reset()
            ctx = torch.tensor(prompt + roots[:pos], dtype=torch.long)
            logits = pair.target.extend(ctx)
            pair.draft.extend(ctx)
            if pos == 0:
                root = int(cfg.sampler.draw(logits[-1:], rid, np.zeros(1, np.int64))[0])
        if cfg.stop_at_eos and root in pair.eos_ids:
            break
        tree = expand_tree(pair.draft, root, cfg.depth, cfg.topk, cfg.max_nodes, pair.target.vocab_size)
        # a node at depth d of the tree at `pos` draws the token of generated index pos + d + 1 (sampler.py)
        draw = None if cfg.sampler.greedy else (lambda lg, d, p=pos: cfg.sampler.draw(lg, rid, p + 1 + d))
        ver = verify_tree(pair.target, pair.capture, tree, next_tokens=draw)
        rec.add(rid, pos, len(prompt) + pos, tree, ver)
        root = int(ver.target_next[0])
        pos += 1
        advance(1)
        if pos % cfg.chunk == 0 and pos < cfg.max_new_tokens:
            rec.commit()
    advance(cfg.max_new_tokens - pos)
    rec.commit()


def _done(rec: Recording, cfg: RecordConfig, pair: Pair, rid: int) -> bool:
    n = rec.counts[rid]
    return n >= cfg.max_new_tokens or (cfg.stop_at_eos and n > 0 and rec.last_next.get(rid) in pair.eos_ids)


def run_record(cfg: RecordConfig) -> Path:
    """`tracer record`: load, record every request, commit as it goes; returns the trace path."""
    cfg.check()
    prompts = read_prompts(cfg.prompts, cfg.max_prompts)
    check_device(cfg.device)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    pair = load_pair(cfg.model, cfg.draft, dtype=cfg.dtype, device=cfg.device, attn=cfg.attn,
                     trust_remote_code=cfg.trust_remote_code)
    if cfg.topk > pair.target.vocab_size:
        raise TracerError(f"--topk {cfg.topk}: larger than the vocabulary ({pair.target.vocab_size})")
    draft_vocab = pair.draft_info["shape"].get("draft_vocab_size")
    if draft_vocab is not None and cfg.topk > draft_vocab:
        raise TracerError(f"--topk {cfg.topk}: larger than the draft's vocabulary ({draft_vocab})")
    ids = tokenize(prompts, pair.tokenizer, pair.target.vocab_size)
    manifest = _manifest(cfg, pair, prompts, ids)
    rec = Recording(cfg.out, manifest, cfg.gates)
    if cfg.resume and (cfg.out / MANIFEST).is_file():
        try:
            old = read_trace(cfg.out)
        except EcoSimError as e:
            raise TracerError(f"--resume: {e}") from None
        _check_resumable(old.manifest, manifest, cfg.out)
        rec.load(old)
    rec.commit()
    todo = [rid for rid in range(len(ids)) if not _done(rec, cfg, pair, rid)]
    total = len(ids) * cfg.max_new_tokens
    finished = total - sum(cfg.max_new_tokens - rec.counts[r] for r in todo)
    try:
        with progress_bar(total, finished, enabled=cfg.progress) as advance:
            for rid in todo:
                record_request(pair, rec, cfg, rid, ids[rid], advance)
        rec.commit(complete=True)
    except KeyboardInterrupt:
        words = [w for w in shlex.split(cfg.command) if w != "--force"]
        again = shlex.join(words + ([] if "--resume" in words else ["--resume"])) if words else "the same command with --resume"
        raise Interrupted(f"interrupted; {rec.committed} of {total} positions committed to {cfg.out} (a valid trace); "
                          f"to continue: {again}") from None
    return cfg.out

