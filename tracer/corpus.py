"""Training text that ships with every Python install: no downloads.

Two sources, both under the PSF License (Python Software Foundation License Version 2):

* the standard library's own ``*.py`` sources (``sysconfig.get_paths()["stdlib"]``), walked in
  sorted order, skipping ``site-packages`` and test suites (which are large and full of odd
  fixtures), and
* the pydoc topics (``pydoc_data.topics.topics``), the text behind ``help("topic")``.

The split into train/validation is by *document* (one file or one topic), decided by a hash of
the document's name, so it does not depend on which Python patch release is installed beyond the
files themselves, and a file never straddles both sides.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Document", "collect", "split", "stdlib_root", "corpus_texts"]

LICENCE = "PSF License Version 2 (Python standard library sources and pydoc topics)"

# Directories skipped anywhere in a path (relative to the stdlib root).
_SKIP_PARTS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3"}
)
_MAX_FILE_BYTES = 400_000  # a few generated tables (e.g. unicode data) are huge and unhelpful


@dataclass(frozen=True)
class Document:
    name: str  # "stdlib/<relative path>" or "pydoc/<topic>"
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_documents(max_files: int | None = None) -> list[Document]:
    root = stdlib_root()
    docs: list[Document] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in _SKIP_PARTS for part in rel.parts):
            continue
        try:
            if path.stat().st_size > _MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.strip():
            continue
        docs.append(Document("stdlib/" + rel.as_posix(), text))
        if max_files is not None and len(docs) >= max_files:
            break
    return docs


def _pydoc_documents() -> list[Document]:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # stripped-down Python builds
        return []
    return [Document("pydoc/" + k, topics[k]) for k in sorted(topics) if topics[k].strip()]


def collect(max_files: int | None = None) -> list[Document]:
    """All documents, deterministic order: stdlib files (sorted by path), then pydoc topics."""
    return _stdlib_documents(max_files) + _pydoc_documents()


def is_validation(name: str, val_fraction: float = 0.05) -> bool:
    h = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")
    return (h % 10_000) < int(round(val_fraction * 10_000))


def split(
    docs: list[Document], val_fraction: float = 0.05
) -> tuple[list[Document], list[Document]]:
    """Deterministic split by document name. Returns (train, validation), order kept."""
    train = [d for d in docs if not is_validation(d.name, val_fraction)]
    val = [d for d in docs if is_validation(d.name, val_fraction)]
    return train, val


def corpus_texts(max_files: int | None = None, val_fraction: float = 0.05):
    """Convenience: (train_texts, val_texts) as lists of strings."""
    train, val = split(collect(max_files), val_fraction)
    return [d.text for d in train], [d.text for d in val]


if __name__ == "__main__":  # pragma: no cover - a quick summary
    docs = collect()
    tr, va = split(docs)
    print(f"stdlib root: {stdlib_root()}")
    print(f"documents: {len(docs)} (train {len(tr)}, val {len(va)})")
    print(f"chars: train {sum(len(d.text) for d in tr):,}, val {sum(len(d.text) for d in va):,}")
