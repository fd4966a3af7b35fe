"""Security: nothing in the tree can run code from a file it reads.

- no pickle anywhere: no `import pickle` (nor cPickle, dill, joblib, shelve, marshal), no
  `allow_pickle=True`, no `pd.read_pickle`, no `torch.load(` without `weights_only=True`;
- no hard-coded `trust_remote_code=True`: it is a flag the user passes (`--trust-remote-code`),
  off by default, and the tracer's loaders pass exactly what they are given;
- no `eval(`/`exec(`/`compile(` (the builtins) in the code, and the report notebooks never
  execute or render as markup anything read from a trace.

Python files are checked on their syntax tree (so a docstring that states the rule is not a
hit); other text files by pattern. The tree is what git tracks plus what it would add.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

SELF = "tests/test_security.py"
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".json", ".yaml", ".yml", ".sh", ""}


def _tree() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sorted({p for p in out.splitlines() if (ROOT / p).is_file()})


@pytest.fixture(scope="module")
def files() -> list[str]:
    return _tree()


@pytest.fixture(scope="module")
def python(files) -> dict[str, ast.Module]:
    trees = {}
    for p in files:
        if p.endswith(".py") and p != SELF:
            trees[p] = ast.parse((ROOT / p).read_text(encoding="utf-8"), filename=p)
    return trees


def _name(node: ast.AST) -> str:
    """`a.b.c` of a call's function (or '' when it is not a plain dotted name)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def test_the_tree_is_there(files, python):
    assert "ecosim/trace/io.py" in files and "tracer/loading.py" in files and len(python) > 50


def test_no_pickle_imports(python):
    hits = []
    for path, tree in python.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                hits += [f"{path}:{node.lineno} import {a.name}" for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
                hits.append(f"{path}:{node.lineno} from {node.module} import ...")
    assert not hits, hits


def test_no_call_that_unpickles(python):
    hits = []
    for path, tree in python.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            where = f"{path}:{node.lineno} {name}("
            if _kw(node, "allow_pickle") is not None and not (isinstance(_kw(node, "allow_pickle"), ast.Constant)
                                                              and _kw(node, "allow_pickle").value is False):
                hits.append(where + "allow_pickle=...)")
            if name.endswith(("read_pickle", "to_pickle", ".loads")) and name.split(".")[0] in {"pd", "pandas", "pickle"}:
                hits.append(where)
            if name == "torch.load" and not _is_true(_kw(node, "weights_only")):
                hits.append(where + " without weights_only=True")
            if name in ("np.load", "numpy.load") and _kw(node, "allow_pickle") is None:
                hits.append(where + " without allow_pickle=False")
            if name.endswith("from_pretrained") and "Tokenizer" not in name and "Config" not in name:
                if _kw(node, "use_safetensors") is not None and not _is_true(_kw(node, "use_safetensors")):
                    hits.append(where + " use_safetensors not True")
    assert not hits, hits


def test_no_text_file_asks_for_pickle_or_remote_code(files):
    """Outside Python (scripts, configs, docs' commands): no allow_pickle=True, torch.load without
    weights_only, or trust_remote_code=True."""
    bad = re.compile(r"allow_pickle\s*=\s*True|trust_remote_code\s*=\s*True|torch\.load\((?![^)]*weights_only\s*=\s*True)")
    hits = []
    for p in files:
        if p.endswith(".py") or Path(p).suffix not in TEXT_SUFFIXES or p.startswith(("models/", "traces/")):
            continue
        try:
            text = (ROOT / p).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{p}: {m.group(0)}" for m in bad.finditer(text)]
    assert not hits, hits


def test_trust_remote_code_is_never_hard_coded_on(python):
    hits = []
    for path, tree in python.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                v = _kw(node, "trust_remote_code")
                if v is not None and not isinstance(v, (ast.Name, ast.Attribute)) and not (
                        isinstance(v, ast.Constant) and v.value is False):
                    hits.append(f"{path}:{node.lineno} trust_remote_code={ast.unparse(v)}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults + node.args.kw_defaults
                for a, d in zip(args, defaults):
                    if a.arg == "trust_remote_code" and d is not None and not (isinstance(d, ast.Constant) and d.value is False):
                        hits.append(f"{path}:{node.lineno} {node.name}(trust_remote_code={ast.unparse(d)})")
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "trust_remote_code":
                if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                    hits.append(f"{path}:{node.lineno} field trust_remote_code = {ast.unparse(node.value) if node.value else '?'}")
    assert not hits, hits


def test_no_eval_or_exec(python):
    """The builtins that run a string as code appear nowhere (methods named eval, e.g. a torch
    module's .eval(), are fine). Tests that build a child process's code as a string use `-c`."""
    hits = []
    for path, tree in python.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec", "compile", "__import__"):
                hits.append(f"{path}:{node.lineno} {node.func.id}(")
            if isinstance(node, ast.Call) and _name(node.func) in ("builtins.eval", "builtins.exec", "os.system", "ast.literal_eval"):
                hits.append(f"{path}:{node.lineno} {_name(node.func)}(")
    assert not hits, hits


def test_reports_never_run_or_render_trace_content(python):
    """The notebooks read traces only through ecosim's reader, and show what they read as plain
    text and figures: no subprocess, no dynamic import, no HTML/Markdown/JavaScript display."""
    notebooks = {p: t for p, t in python.items() if p.startswith("reports/") or p == "ecosim/report.py"}
    assert any(p.startswith("reports/") for p in notebooks)
    banned_calls = {"HTML", "Markdown", "Javascript", "display_html", "display_markdown", "display_javascript",
                    "import_module", "run_path", "run_module", "os.system", "os.popen", "os.exec", "literal_eval"}
    banned_modules = {"subprocess", "importlib", "runpy", "IPython.display", "pickle"}
    hits = []
    for path, tree in notebooks.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _name(node.func)
                if name in banned_calls or name.rsplit(".", 1)[-1] in banned_calls:
                    hits.append(f"{path}:{node.lineno} {name}(")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                hits += [f"{path}:{node.lineno} import {m}" for m in mods if m in banned_modules or m.split(".")[0] in banned_modules]
    assert not hits, hits


def test_notebook_parameters_are_paths_not_trace_content():
    """`ecosim report` injects only the paths it was given (papermill writes them as string
    literals); nothing from a trace's manifest reaches the notebooks' code."""
    src = (ROOT / "ecosim" / "report.py").read_text()
    tree = ast.parse(src)
    params = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "params" for t in n.targets))
    assert isinstance(params.value, ast.Dict)
    assert [k.value for k in params.value.keys] == ["traces", "out", "validation", "routing"]
    assert "manifest" not in ast.unparse(params.value) and "read_trace" not in src
    if importlib.util.find_spec("papermill") is not None:  # and a hostile path stays a string literal
        from papermill.translators import PythonTranslator

        evil = '/x"; import os; os.system("touch PWNED"); y="\\\n'
        code = PythonTranslator().codify({"traces": evil})
        statements = ast.parse(code).body  # one assignment of a string literal, nothing else
        assert len(statements) == 1 and isinstance(statements[0], ast.Assign)
        assert isinstance(statements[0].value, ast.Constant) and statements[0].value.value == evil


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_loaders_pass_trust_remote_code_only_when_asked(tmp_path, monkeypatch):
    """Every transformers loader the tracer calls gets trust_remote_code=False unless the user
    passed --trust-remote-code (recorded by stand-ins: no model is built)."""
    import transformers

    import tracer.loading as loading

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    seen: list[tuple[str, object, object]] = []

    class Stub:
        config = type("C", (), {"output_router_logits": False, "model_type": "qwen3_moe"})()

        def eval(self):  # the module's method, not the builtin
            return self

    def recorder(what):
        def from_pretrained(ref, **kw):
            seen.append((what, kw.get("trust_remote_code", "missing"), kw.get("use_safetensors")))
            return Stub.config if what == "config" else Stub()
        return from_pretrained

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", recorder("model"))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", recorder("tokenizer"))
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", recorder("config"))
    src = loading.resolve(str(tmp_path))
    for asked in (False, True):
        seen.clear()
        kw = {"trust_remote_code": True} if asked else {}
        loading.load_model(src, **kw)
        loading.load_tokenizer(src, **kw)
        assert {w for w, _, _ in seen} == {"model", "tokenizer", "config"}
        assert all(t is asked for _, t, _ in seen), seen
        assert all(s is True for w, s in ((w, s) for w, _, s in seen) if w == "model"), seen


def test_the_cli_flag_is_off_by_default():
    if importlib.util.find_spec("typer") is None:
        pytest.skip("needs typer")
    import typer.main

    from tracer.cli import app

    record = typer.main.get_command(app).commands["record"]
    opt = next(p for p in record.params if p.name == "trust_remote_code")
    assert opt.default is False and opt.is_flag and "--trust-remote-code" in opt.opts
