"""The import graph of `ecosim` (read with ast, imports inside functions included): no cycle, and
every import goes down the layers below, never up. A module may import its own layer and lower.
`validate` and `tracer` sit above `ecosim`; `ecosim` imports neither, nor torch or transformers.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import ROOT

# Lowest first. A module belongs to the layer of the longest prefix naming it.
LAYERS = [
    ["ecosim.errors", "ecosim.units", "ecosim.bitsets", "ecosim.pairwise", "ecosim.fidelity_sampled", "ecosim.metrics", "ecosim.catalog", "ecosim.trace.schema",
     "ecosim.version", "ecosim.outputs", "ecosim.tree_config", "ecosim.memo", "ecosim.options", "ecosim.gate", "ecosim.arrivals"],
    ["ecosim.trace", "ecosim.tree", "ecosim.placements", "ecosim.cache", "ecosim.oracle", "ecosim.synth",
     "ecosim.synth_draft", "ecosim.routing.generator", "ecosim.steps", "ecosim.routing.presets"],
    ["ecosim.cost", "ecosim.predictors", "ecosim.routing", "ecosim.hybrid", "ecosim.acceptance", "ecosim.union_scale",
     "ecosim.marginal", "ecosim.auto"],
    ["ecosim.policies"],
    ["ecosim.replay", "ecosim.stream", "ecosim.des", "ecosim.simulate", "ecosim.summary"],
    ["ecosim.sweep"],
    ["ecosim.analysis", "ecosim.report", "ecosim.api", "ecosim.tune", "ecosim.tune_llamacpp", "ecosim.launch", "ecosim.fidelity", "ecosim.verdict", "ecosim.readings", "ecosim.plots"],
    ["ecosim.cli"],
    ["ecosim"],  # the package itself: the public API
]
FORBIDDEN = ("torch", "transformers", "validate", "tracer")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / "ecosim").rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """Modules of `known` that `path` imports (`from a import b` is a.b when that is a module);
    other top-level names it imports are returned as they are."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
    return out


def layer(mod: str) -> int:
    best, at = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, at = len(p), i
    assert at >= 0, f"{mod} is in no layer: add it to LAYERS"
    return at


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {d for d in imports(p, set(mods)) if d in mods and d != m} for m, p in mods.items()}


def test_every_import_goes_down_or_sideways():
    bad = [f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
           for m, deps in graph().items() for d in deps if layer(d) > layer(m)]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if d.startswith(m + "."):  # a package importing its own submodules is how packages work
                continue
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(g):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, " -> ".join(cycle)


def test_ecosim_imports_no_model_code_nor_the_packages_above_it():
    mods = modules()
    bad = [f"{m} imports {d}" for m, p in mods.items() for d in imports(p, set(mods))
           if d.split(".")[0] in FORBIDDEN]
    assert not bad, "\n".join(bad)


def test_the_cycle_finder_finds_a_cycle(monkeypatch):
    """The check above can fail: a graph with a cycle is reported."""
    fake = {"ecosim.a": {"ecosim.b"}, "ecosim.b": {"ecosim.c"}, "ecosim.c": {"ecosim.a"}}
    monkeypatch.setattr(sys.modules[__name__], "graph", lambda: fake)
    try:
        test_no_import_cycle()
    except AssertionError as e:
        assert "ecosim.a -> ecosim.b -> ecosim.c -> ecosim.a" in str(e)
    else:
        raise AssertionError("a cycle went unnoticed")


def test_reports_use_only_the_public_api():
    """The report notebooks import `ecosim` itself (api.py, re-exported by __init__.py), never a
    module inside it: what a notebook needs is public, documented and kept stable."""
    bad = []
    for path in sorted(p for p in (ROOT / "reports").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            bad += [f"{path.name}: {n}" for n in names if n.startswith("ecosim.")]
    assert not bad, "reports/ import ecosim internals (use or extend ecosim/api.py):\n" + "\n".join(bad)
