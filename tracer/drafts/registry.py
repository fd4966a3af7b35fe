"""The draft kinds `tracer record --draft` accepts, one entry each; nothing else compares their names.

    model:PATH      a separate checkpoint sharing the target's tokenizer (a bare PATH means the same)
    early-exit:N    the target's first N layers, its final norm and LM head (N or auto)
    mtp             DeepSeek-V3's MTP module, from the target checkpoint's extra layer
    eagle3:PATH     an EAGLE-3 head directory (config.json + safetensors)

Every kind expands the same EAGLE-2 tree (`tree.expand_tree`) and describes its cost in the
manifest's `draft` object (`drafts.cost`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracer.errors import TracerError
from tracer.loading import Source


@dataclass(frozen=True)
class Kind:
    """One draft kind: its `--draft` syntax, a line of help, the module that loads it (imported only
    when a draft of this kind is loaded: it needs torch, `--help` does not) and whether it has an
    early check (`precheck(src)`)."""

    name: str
    usage: str
    help: str
    module: str
    takes_arg: bool
    checks: bool = False

    @property
    def load(self) -> Callable[..., tuple[Any, dict[str, Any]]]:
        return importlib.import_module(self.module).load  # type: ignore[no-any-return]

    @property
    def precheck(self) -> Callable[[Source], None] | None:
        return importlib.import_module(self.module).precheck if self.checks else None


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("model", "model:PATH", "a separate checkpoint sharing the target's tokenizer (dir, name or hub id)", "tracer.drafts.model", True),
    Kind("early-exit", "early-exit:N", "the target's first N layers + final norm + LM head (N or auto)", "tracer.drafts.early_exit", True),
    Kind("mtp", "mtp", "DeepSeek-V3's MTP module from the target checkpoint's layer num_hidden_layers", "tracer.drafts.mtp", False, True),
    Kind("eagle3", "eagle3:PATH", "an EAGLE-3 head directory (config.json + safetensors)", "tracer.drafts.eagle3", True),
)}


def usage() -> str:
    return ", ".join(k.usage for k in KINDS.values())


def help_text() -> str:
    """`--draft`'s help: every kind with its line (generated, so a new kind is never missing)."""
    return "; ".join(f"'{k.usage}' ({k.help})" for k in KINDS.values())


def parse(spec: str) -> tuple[Kind, str]:
    """(kind, argument) of a `--draft` value; a value with no known kind prefix is a `model:` path."""
    spec = spec.strip()
    head, sep, arg = spec.partition(":")
    kind = KINDS.get(head)
    if kind is None:
        if not spec:
            raise TracerError(f"--draft: empty value; expected one of {usage()}")
        return KINDS["model"], spec
    if kind.takes_arg and not arg.strip():
        raise TracerError(f"--draft {spec}: expected {kind.usage}")
    if not kind.takes_arg and sep:
        raise TracerError(f"--draft {spec}: {kind.name} takes no argument (expected {kind.usage})")
    return kind, arg.strip()
