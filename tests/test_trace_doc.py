"""docs/TRACE_FORMAT.md and docs/PROFILES.md say what the code checks: every Parquet column with its type
(ecosim/trace/schema.py), every manifest and profile key with its type, range and meaning (the declarations
in ecosim/gate, from which `python -m ecosim.gate.doc` prints the tables), both ways (a key added to one and not
the other fails here)."""

from __future__ import annotations

import re

import pyarrow as pa

from conftest import ROOT
from ecosim.gate import doc as gate_doc
from ecosim.gate.core import allowed, type_word
from ecosim.gate.profiles import HardwareSpec, ServingSpec
from ecosim.gate.trace import TABLES as MANIFEST_TABLES
from ecosim.trace import schema

DOC = ROOT / "docs" / "TRACE_FORMAT.md"
PROFILES = ROOT / "docs" / "PROFILES.md"


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
    for title, spec in MANIFEST_TABLES.items():
        assert found[title] == {k: type_word(f.annotation) for k, f in spec.model_fields.items()}, title


def test_the_docs_tables_are_the_declarations_printed():
    """Every generated block of both docs is current (`python -m ecosim.gate.doc` rewrites them)."""
    for name in gate_doc.FILES:
        text = (ROOT / "docs" / name).read_text()
        assert "<!-- gate:" in text, name
        assert gate_doc.render(text) == text, f"docs/{name} is stale: run python -m ecosim.gate.doc"
    assert gate_doc.main(["--check"]) == 0


def test_a_changed_range_makes_the_docs_stale():
    text = DOC.read_text()
    assert "| an integer in [1, 32767] | routed experts per MoE layer |" in text
    edited = text.replace("| an integer in [1, 32767] | routed experts per MoE layer |", "| an integer in [1, 99] | routed experts per MoE layer |")
    assert gate_doc.render(edited) == text


def test_the_profile_doc_lists_every_declared_field_with_what_it_allows():
    found = tables(PROFILES.read_text())
    for title, spec in (("Hardware profile", HardwareSpec), ("Serving profile", ServingSpec)):
        rows = found[title]
        assert set(rows) == set(spec.model_fields), title
        assert all(allowed(f) in PROFILES.read_text() for f in spec.model_fields.values())


def test_every_field_of_a_device_and_a_serving_profile_is_declared():
    """A field added to the dataclass a profile becomes is let through the gate untyped until declared: here."""
    import dataclasses

    from ecosim.catalog.devices import Device
    from ecosim.catalog.serving import ServingProfile

    assert {f.name for f in dataclasses.fields(Device)} <= set(HardwareSpec.model_fields)
    assert {f.name for f in dataclasses.fields(ServingProfile)} <= set(ServingSpec.model_fields)


def test_the_doc_names_its_version():
    text = DOC.read_text()
    assert re.search(rf"^\| {schema.VERSION} \|", text, re.M), "the Versions table lacks the schema's version"
    assert f'"{schema.FORMAT}"' in text


def test_a_column_missing_from_the_doc_is_caught():
    text = DOC.read_text().replace("| `n_nodes` | int16 |", "| `n_nodez` | int16 |")
    found = tables(text)["positions.parquet: one row per (request, position)"]
    assert found != {k: arrow_name(t) for k, t in schema.POSITION_COLUMNS.items()}
