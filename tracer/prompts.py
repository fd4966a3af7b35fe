"""Prompt files: JSON Lines, one request a line, ``{"task": ..., "text": ...}`` or ``"input_ids"``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracer.errors import TracerError


@dataclass(frozen=True)
class Prompt:
    task: str
    text: str | None
    input_ids: tuple[int, ...] | None
    where: str  # "file:line", for messages


def _expand(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise TracerError(f"--prompts {p}: no *.jsonl files in this directory")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise TracerError(f"--prompts {p}: no such file or directory")
    return files


def _parse(obj: Any, where: str) -> Prompt:
    if not isinstance(obj, dict):
        raise TracerError(f"{where}: expected a JSON object with 'task' and 'text' or 'input_ids'")
    task = obj.get("task")
    if not isinstance(task, str) or not task:
        raise TracerError(f"{where}: 'task' must be a non-empty string (e.g. coding, reasoning, qa, dialogue)")
    text, ids = obj.get("text"), obj.get("input_ids")
    if (text is None) == (ids is None):
        raise TracerError(f"{where}: give exactly one of 'text' and 'input_ids'")
    if text is not None and (not isinstance(text, str) or not text):
        raise TracerError(f"{where}: 'text' must be a non-empty string")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise TracerError(f"{where}: 'input_ids' must be a non-empty list of non-negative integers")
        ids = tuple(ids)
    return Prompt(task, text, ids, where)


def read_prompts(paths: list[Path], limit: int | None = None) -> list[Prompt]:
    """Every prompt of the files (a directory stands for its *.jsonl, sorted), in order."""
    out: list[Prompt] = []
    for f in _expand(paths):
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise TracerError(f"--prompts {f}: unreadable ({e})") from None
        taken = 0
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if limit is not None and taken >= limit:
                break
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise TracerError(f"{f}:{n}: not valid JSON ({e})") from None
            out.append(_parse(obj, f"{f}:{n}"))
            taken += 1
    if not out:
        raise TracerError("--prompts: no prompts in the given files")
    return out


def tokenize(prompts: list[Prompt], tokenizer: Any, vocab_size: int) -> list[list[int]]:
    """Token ids of each prompt (text through the target's tokenizer, special tokens included)."""
    out = []
    for p in prompts:
        ids = list(p.input_ids) if p.input_ids is not None else list(tokenizer(p.text)["input_ids"])
        if not ids:
            raise TracerError(f"{p.where}: the prompt encodes to no tokens")
        bad = [t for t in ids if t >= vocab_size]
        if bad:
            raise TracerError(f"{p.where}: token id {bad[0]} outside the target's vocabulary ({vocab_size})")
        out.append(ids)
    return out
