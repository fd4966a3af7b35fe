"""The draft kinds `tracer record --draft` accepts, one entry each; nothing else compares their names.

    model:PATH      a separate checkpoint sharing the target's tokenizer (a bare PATH means the same)
    early-exit:N    the target's first N layers, its final norm and LM head (N or auto)
    mtp             DeepSeek-V3's MTP module, from the target checkpoint's extra layer
    eagle3:PATH     an EAGLE-3 head directory (config.json + safetensors)

Every kind expands the same EAGLE-2 tree (`tree.expand_tree`) and describes its cost in the
manifest's `draft` object (`drafts.cost`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracer.drafts import eagle3, early_exit, model, mtp
from tracer.errors import TracerError
from tracer.loading import Source


@dataclass(frozen=True)
class Kind:
    """One draft kind: its `--draft` syntax, a line of help, its loader and an early check."""

    name: str
    usage: str
    help: str
    load: Callable[..., tuple[Any, dict[str, Any]]]
    takes_arg: bool
    precheck: Callable[[Source], None] | None = None


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("model", "model:PATH", "a separate checkpoint sharing the target's tokenizer (dir, name or hub id)", model.load, True),
    Kind("early-exit", "early-exit:N", "the target's first N layers + final norm + LM head (N or auto)", early_exit.load, True),
    Kind("mtp", "mtp", "DeepSeek-V3's MTP module from the target checkpoint's layer num_hidden_layers", mtp.load, False, mtp.precheck),
    Kind("eagle3", "eagle3:PATH", "an EAGLE-3 head directory (config.json + safetensors)", eagle3.load, True),
)}


def usage() -> str:
    return ", ".join(k.usage for k in KINDS.values())


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
