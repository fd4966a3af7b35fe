"""One look for the three programs (ecosim, tracer, validate), readable at 80 columns.

Every command's `--help` at COLUMNS=80: every option name in full, no line wider than 80, no
ellipsis, and no help text eaten by markup (brackets survive); errors name the subcommand's help.
"""

from __future__ import annotations

import importlib.util

import pytest
import typer.main

from ecosim.cli import app as ecosim_app
from ecosim.cli import main as ecosim_main

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def _programs():
    import ecosim.cli.predictor, ecosim.cli.replay, ecosim.cli.report, ecosim.cli.sweep, ecosim.cli.traces  # noqa: F401

    progs = [("ecosim", ecosim_app, ecosim_main)]
    if HAS_TORCH:
        from tracer.cli import app as tracer_app
        from tracer.cli import main as tracer_main
        from validate.cli import app as validate_app
        from validate.cli import main as validate_main

        progs += [("tracer", tracer_app, tracer_main), ("validate", validate_app, validate_main)]
    return progs


def _commands(group, path):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, [*path, name])
        else:
            yield [*path, name], cmd


def _call(main, argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code or 0, capsys.readouterr().out


@pytest.mark.parametrize("prog", ["ecosim", "tracer", "validate"])
def test_every_help_is_whole_at_80_columns(prog, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    found = {p: (a, m) for p, a, m in _programs()}
    if prog not in found:
        pytest.skip("tracer and validate need torch and transformers")
    app, main = found[prog]
    n = 0
    for path, cmd in _commands(typer.main.get_command(app), []):
        code, out = _call(main, [*path, "--help"], capsys)
        assert code == 0, path
        assert "…" not in out, (path, out)
        wide = [line for line in out.splitlines() if len(line) > 80]
        assert not wide, (path, wide)
        for p in cmd.params:
            for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
                if opt.startswith("--"):
                    assert opt in out, f"{prog} {' '.join(path)}: {opt} missing from --help"
        n += 1
    assert n >= 3


@pytest.mark.skipif(not HAS_TORCH, reason="validate needs torch")
def test_bracketed_help_text_survives(monkeypatch, capsys):
    from validate.cli import main as validate_main

    monkeypatch.setenv("COLUMNS", "200")
    _, out = _call(validate_main, ["calibrate", "--help"], capsys)
    assert "spread over [top_k, min(experts, tokens x top_k)]" in " ".join(out.split())


def test_usage_errors_name_the_subcommand_help(capsys):
    assert ecosim_main(["replay", "--bogus"]) == 2
    assert "(see 'ecosim replay --help')" in capsys.readouterr().err
    assert ecosim_main(["predictor", "train"]) == 2
    assert "(see 'ecosim predictor train --help')" in capsys.readouterr().err


def test_a_bare_command_prints_its_help(capsys):
    assert ecosim_main([]) == 0
    assert "Commands:" in capsys.readouterr().out
    assert ecosim_main(["predictor"]) == 0
    assert "train" in capsys.readouterr().out
