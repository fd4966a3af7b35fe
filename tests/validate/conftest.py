"""A tiny random Qwen3-MoE pair (built once per session), its prompts and a trace recorded from it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    collect_ignore_glob = ["test_*.py"]  # an ecosim-only install: nothing here can run
else:
    import torch

    torch.set_num_threads(1)

from vhelpers import NEW_TOKENS, PROMPTS, TREE  # noqa: E402


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory) -> Path:
    from tracer.tiny import write_tiny

    return write_tiny("qwen3_moe", tmp_path_factory.mktemp("vtiny") / "qwen3_moe")


@pytest.fixture(scope="session")
def prompts_path(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("vprompts") / "p.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in PROMPTS))
    return p


@pytest.fixture(scope="session")
def pair(tiny_pair_dir):
    """The tiny target with its own tiny draft (random: drafts are rarely accepted)."""
    from tracer.pair import load_pair

    return load_pair(str(tiny_pair_dir))


@pytest.fixture(scope="session")
def self_pair(tiny_pair_dir):
    """The tiny target drafting for itself: the draft's top-1 is the target's argmax, so most
    drafts are accepted and the accepted path is rarely contiguous in the kept tree."""
    from tracer.pair import load_pair

    return load_pair(str(tiny_pair_dir), str(tiny_pair_dir / "target"))


@pytest.fixture(scope="session")
def self_trace(tmp_path_factory, tiny_pair_dir, prompts_path):
    """A trace recorded with the self-drafting pair (the oracle predictor and the replays read it)."""
    from ecosim.trace.io import read_trace
    from tracer.record import RecordConfig, run_record

    out = tmp_path_factory.mktemp("vtrace") / "trace"
    run_record(RecordConfig(model=str(tiny_pair_dir), draft=str(tiny_pair_dir / "target"), prompts=[prompts_path], out=out,
                            max_new_tokens=NEW_TOKENS, progress=False, threads=1, **TREE))
    return read_trace(out)
