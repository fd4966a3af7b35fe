"""Tiny checkpoints of the five families (built once per session) and their loaded pairs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    collect_ignore_glob = ["test_*.py"]  # an ecosim-only install: nothing here can run
else:
    import torch

    torch.set_num_threads(1)  # small models; deterministic and polite on a shared 2-core machine

PROMPTS = [
    {"task": "coding", "text": "def add(a, b):\n    return"},
    {"task": "qa", "text": "What does the with statement do?"},
    {"task": "dialogue", "input_ids": [1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53]},
]


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """family -> a pair directory (target/, draft/) of tiny random models."""
    from tracer.tiny import FAMILIES, write_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {f: write_tiny(f, root / f) for f in FAMILIES}


@pytest.fixture(scope="session")
def pairs(tiny_dirs) -> dict:
    """family -> the loaded target (with router hooks) and its tiny draft; each loaded once, lazily."""
    from tracer.pair import load_pair

    class Lazy(dict):
        def __missing__(self, family: str):
            self[family] = load_pair(str(tiny_dirs[family]))
            return self[family]

    return Lazy()


@pytest.fixture(scope="session")
def prompts_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in PROMPTS))
    return p
