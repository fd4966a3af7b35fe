"""The docs' field tables, printed from the declarations (so the docs and the gate cannot drift).

`python -m ecosim.gate.doc` rewrites, in docs/TRACE_FORMAT.md and docs/PROFILES.md, every block between
`<!-- gate:NAME -->` and `<!-- /gate -->` with the table of declaration NAME; `--check` only says whether they
are current (tests/test_trace_doc.py runs it). Each row: key, type, what is allowed (the words a refusal
prints), meaning (the field's description).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pydantic import BaseModel

from ecosim.gate.core import allowed, type_word
from ecosim.gate.profiles import TABLES as PROFILE_TABLES
from ecosim.gate.trace import TABLES as TRACE_TABLES

DOCS = Path(__file__).resolve().parents[2] / "docs"
TABLES: dict[str, type[BaseModel]] = {**TRACE_TABLES, **PROFILE_TABLES}
FILES = ("TRACE_FORMAT.md", "PROFILES.md")
BLOCK = re.compile(r"(<!-- gate:(?P<name>[^ ]+) -->\n)(?P<body>.*?)(<!-- /gate -->)", re.S)


def table(spec: type[BaseModel]) -> str:
    """A declaration as a Markdown table: | key | type | allowed | meaning |."""
    rows = ["| key | type | allowed | meaning |", "|---|---|---|---|"]
    for name, field in spec.model_fields.items():
        cells = [f"`{name}`", type_word(field.annotation), allowed(field), field.description or ""]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    """The text with every gate block replaced by its current table."""

    def one(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise KeyError(f"no declaration named {name!r}; known: {', '.join(TABLES)}")
        return m.group(1) + table(TABLES[name]) + m.group(4)

    return BLOCK.sub(one, text)


def main(argv: list[str]) -> int:
    stale = []
    for name in FILES:
        path = DOCS / name
        text = path.read_text()
        new = render(text)
        if new != text:
            stale.append(name)
            if "--check" not in argv:
                path.write_text(new)
    if stale:
        print(("stale: " if "--check" in argv else "rewrote: ") + ", ".join(stale))
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
