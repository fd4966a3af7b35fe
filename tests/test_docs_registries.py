"""Help and README agree with the catalogues and registries they describe, and the project's text
speaks of the project itself.

A `--help` that lists catalogue entries or registry names lists every one (it is generated from
them); the README's counts are the registries' sizes; no example writes to a fixed /tmp path; no
text points at how a change was asked for (an issue number, "the issue") or who researched it.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess

import pytest
import typer.main

from conftest import ROOT
from ecosim.catalog.devices import DEVICES
from ecosim.synth_draft import DRAFTS
from ecosim.catalog.models import MODELS
from ecosim.catalog.serving import shipped
from ecosim.cli import app
from ecosim.placements import PLACEMENTS
from ecosim.policies import registry
from ecosim.predictors import BUILTIN, KINDS

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
README = (ROOT / "README.md").read_text()


def _help(command_path: list[str], option: str) -> str:
    import ecosim.cli.predictor, ecosim.cli.replay, ecosim.cli.sweep, ecosim.cli.traces, ecosim.cli.tune  # noqa: F401

    cmd = typer.main.get_command(app)
    for name in command_path:
        cmd = cmd.commands[name]
    [param] = [p for p in cmd.params if option in p.opts]
    return " ".join(param.help.split())


PRICED = [["replay"], ["sweep"], ["tune"], ["predictor", "compare"]]


@pytest.mark.parametrize("command", PRICED, ids=" ".join)
def test_hardware_and_placement_help_list_every_catalogue_device_and_placement_kind(command):
    hw = _help(command, "--hardware")
    assert all(name in re.findall(r"[\w-]+", hw) for name in DEVICES), hw  # h20 among them
    place = _help(command, "--placement")
    assert all(kind.syntax in place for kind in PLACEMENTS), place


@pytest.mark.parametrize("command", [["replay"], ["sweep"], ["tune"]], ids=" ".join)
def test_profile_and_predictor_help_list_every_shipped_profile_and_predictor_kind(command):
    assert all(name in _help(command, "--profile") for name in shipped())
    assert all(kind in _help(command, "--predictor") for kind in KINDS)


def test_policy_model_and_draft_help_list_their_registries():
    for command in (["replay"], ["sweep"]):
        assert all(name in _help(command, "--policy") for name in registry.names())
    assert all(name in _help(["replay"], "--predictor") for name in BUILTIN)
    assert all(name in _help(["synth"], "--model") for name in MODELS)
    assert all(name in _help(["synth"], "--draft") for name in DRAFTS)


@pytest.mark.skipif(not HAS_TORCH, reason="tracer needs torch")
def test_tracer_draft_help_lists_every_draft_kind():
    from tracer.cli import app as tracer_app
    from tracer.drafts.registry import KINDS as DRAFT_KINDS

    [param] = [p for p in typer.main.get_command(tracer_app).commands["record"].params if "--draft" in p.opts]
    assert all(f"'{k.usage}'" in param.help for k in DRAFT_KINDS.values())


def test_readme_counts_are_the_registries():
    assert f"all {len(registry.names())} registered policies" in README
    assert f"Model shapes ({len(MODELS)}," in README
    assert f"Devices ({len(DEVICES)}," in README
    assert re.search(rf"Serving profiles\s+\({len(shipped())},", README)
    policies = README.split("\n## Policies\n")[1].split("\n## ")[0]
    missing = [n for n in registry.names() if f"`{n}`" not in policies]
    assert not missing, f"the README's Policies section does not describe {missing}"
    assert "policies.py" not in README  # a package now: policies/


def _text_files() -> list[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in files if f.endswith((".py", ".md", ".json", ".toml", ".txt")) or f.startswith("bench/")]


# How a change was asked for, or who did it, is not the project's text: a row's provenance is its url.
ASKED = re.compile(r"(?i)\bthe issue\b|\bsame issue\b|(?<![\w/-])issues? #?\d+(?:, item \d+)?|\b(?:helper|by) h\d\d[a-z]\b|\bh\d\d[ro]\b")


def test_no_text_speaks_of_issues_or_helpers():
    bad = []
    for f in _text_files():
        if f == "tests/test_docs_registries.py":
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for m in ASKED.finditer(text):
            before = text[max(0, m.start() - 30):m.start()]
            if re.search(r"(?i)(/|#|\b[A-Za-z-]+/[\w.-]+ |SpecForge|sglang|vllm|EAGLE|AngelSlim|llama\.cpp|ktransformers|transformers|pytorch|InferenceX|tt-inference-server|ocannl) ?$", before):
                continue  # another project's issue, cited as a source
            bad.append(f"{f}: ...{before}{m[0]}...")
    assert not bad, "\n".join(bad)


def test_examples_write_to_no_fixed_tmp_path():
    docs = ["README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
    for f in docs:
        assert not re.search(r"(?<![\w$)])/tmp/", (ROOT / f).read_text()), f
