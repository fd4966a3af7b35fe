"""One convention for options that take a list, on every command: repeat the option, give a comma
list, or mix both; each is the same run (`--policy ar --policy confidence` = `--policy ar,confidence`)."""

from __future__ import annotations

import re

import importlib.util
import json
from pathlib import Path

import pytest
import typer.main

from conftest import tiny_trace
from ecosim.cli import app, listed, main
from ecosim.errors import EcoSimError
from ecosim.trace.io import write_trace

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("traces")
    write_trace(d / "a", *tiny_trace(11))
    return d


def _json(capsys, *argv: str) -> dict:
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_listed_takes_repeats_and_comma_lists_alike():
    assert listed(["ar", "confidence"], "--policy") == listed(["ar,confidence"], "--policy") == ["ar", "confidence"]
    assert listed(["ar, confidence", "oracle"], "--policy") == ["ar", "confidence", "oracle"]
    assert listed(None, "--policy") == []
    with pytest.raises(EcoSimError, match="--policy 'ar,,oracle': empty item"):
        listed(["ar,", "oracle"], "--policy")


def test_replay_keeps_every_repeated_policy_and_takes_a_comma_list(traces, capsys):
    repeated = _json(capsys, "replay", str(traces), "--policy", "ar", "--policy", "confidence", "--json")
    comma = _json(capsys, "replay", str(traces), "--policy", "ar,confidence", "--json")
    assert [t["policy"] for t in repeated["totals"]] == ["ar", "confidence"]
    assert repeated["totals"] == comma["totals"]


def test_sweep_repeats_are_its_comma_lists(traces, tmp_path, capsys):
    a = _json(capsys, "sweep", str(traces), "--out", str(tmp_path / "a"), "--jobs", "1", "--json",
              "--policy", "ar", "--policy", "confidence", "--budget", "4", "--budget", "8",
              "--hardware", "h200", "--hardware", "h100")
    b = _json(capsys, "sweep", str(traces), "--out", str(tmp_path / "b"), "--jobs", "1", "--json",
              "--policy", "ar,confidence", "--budget", "4,8", "--hardware", "h200,h100")
    assert a["configurations"] == b["configurations"] > 4  # both budgets on both devices, not only the last given
    assert {w["hardware"] for w in a["winner"]["winners"]} == {"h200", "h100"}
    assert [w["config"] for w in a["winner"]["winners"]] == [w["config"] for w in b["winner"]["winners"]]


def _list_options():
    """Every option of every command whose help says it takes a list."""
    import ecosim.cli.predictor, ecosim.cli.replay, ecosim.cli.report, ecosim.cli.sweep, ecosim.cli.traces, ecosim.cli.tune  # noqa: F401

    apps = [("ecosim", app)]
    if HAS_TORCH:
        from tracer.cli import app as tracer_app
        from validate.cli import app as validate_app

        apps += [("tracer", tracer_app), ("validate", validate_app)]

    def walk(group, path):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from walk(cmd, [*path, name])
            else:
                for p in cmd.params:
                    text = (getattr(p, "help", None) or "").lower()
                    if p.param_type_name == "option" and re.search(r"\bcomma\b|\brepeatable\b", text):
                        yield " ".join([*path, name]), p

    for prog, a in apps:
        yield from walk(typer.main.get_command(a), [prog])


def test_every_list_option_is_repeatable_and_says_both_ways():
    found = list(_list_options())
    assert any(cmd == "ecosim replay" and p.name == "policy" for cmd, p in found)
    for cmd, p in found:
        assert p.multiple, f"{cmd} {p.opts[0]} takes a list but keeps only its last repeat"
        assert "repeatable" in p.help.lower(), f"{cmd} {p.opts[0]}: its help should say it is repeatable"
