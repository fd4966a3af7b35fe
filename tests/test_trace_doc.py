"""docs/TRACE_FORMAT.md and ecosim/trace/schema.py say the same: every column and key with its
type, both ways (a column added to one and not the other fails here)."""

from __future__ import annotations

import re

import pyarrow as pa

from conftest import ROOT
from ecosim.trace import schema

DOC = ROOT / "docs" / "TRACE_FORMAT.md"
PY_TYPES = {str: "string", int: "int", bool: "bool", dict: "object", list: "list", (int, float): "number"}


def tables(text: str) -> dict[str, dict[str, str]]:
    """{heading: {name: type}} for every Markdown table whose header starts `| key | type` or
    `| column | type`; the heading is the last `###` line or `name`: line above the table."""
    out: dict[str, dict[str, str]] = {}
    title = ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        elif re.fullmatch(r"`\w+`:", line.strip()):
            title = line.strip().strip("`:")
        elif re.match(r"\| (key|column) \| type \|", line):
            rows: dict[str, str] = {}
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip("|").split("|")]
                rows[cells[0].strip("`")] = cells[1]
            out[title] = rows
    return out


def arrow_name(t: pa.DataType) -> str:
    """int32, float32 (arrow prints `float`), `list of int16` for a fixed-size list."""
    if pa.types.is_fixed_size_list(t):
        return f"list of {arrow_name(t.value_type)}"
    return {"float": "float32", "double": "float64"}.get(str(t), str(t))


def test_the_tables_are_found():
    found = tables(DOC.read_text())
    assert {"manifest.json", "model", "positions.parquet: one row per (request, position)",
            "nodes.parquet: one row per candidate node"} <= set(found)


def test_doc_and_schema_agree_on_every_column_and_key():
    found = tables(DOC.read_text())
    positions = found["positions.parquet: one row per (request, position)"]
    nodes = found["nodes.parquet: one row per candidate node"]
    assert positions == {k: arrow_name(t) for k, t in schema.POSITION_COLUMNS.items()}
    want_nodes = {f.name: arrow_name(f.type) for f in schema.node_schema(8, with_gates=True)}
    assert nodes == want_nodes
    assert found["manifest.json"] == {k: PY_TYPES[t] for k, t in schema.MANIFEST_KEYS.items()}
    assert found["model"] == {k: PY_TYPES[t] for k, t in schema.MODEL_KEYS.items()}


def test_the_doc_names_its_version():
    text = DOC.read_text()
    assert re.search(rf"^\| {schema.VERSION} \|", text, re.M), "the Versions table lacks the schema's version"
    assert f'`"{schema.FORMAT}"`' in text


def test_a_column_missing_from_the_doc_is_caught():
    text = DOC.read_text().replace("| `n_nodes` | int16 |", "| `n_nodez` | int16 |")
    found = tables(text)["positions.parquet: one row per (request, position)"]
    assert found != {k: arrow_name(t) for k, t in schema.POSITION_COLUMNS.items()}
