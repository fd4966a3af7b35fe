"""`ecosim.cli.run` passes a command's own exit status through.

click, run with standalone_mode=False (as `run` does, to print user errors its own way), returns
the code of a `typer.Exit(n)` or `ctx.exit(n)` instead of raising it; `run` used to drop it and
exit 0, so an interrupted sweep or a run that was not lossless looked like success.
"""

from __future__ import annotations

import typer

from ecosim.cli import run
from ecosim.errors import EcoSimError


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def exits(code: int) -> None:
        raise typer.Exit(code)

    @app.command()
    def ctx_exits(ctx: typer.Context, code: int) -> None:
        ctx.exit(code)

    @app.command()
    def fine() -> None:
        print("ok")

    @app.command()
    def bad() -> None:
        raise EcoSimError("no such thing")

    return app


def test_exit_status_of_a_command_propagates():
    app = _app()
    for code in (0, 1, 2, 130):
        assert run(app, "t", ["exits", str(code)]) == code
        assert run(app, "t", ["ctx-exits", str(code)]) == code


def test_success_and_user_errors_keep_their_status(capsys):
    app = _app()
    assert run(app, "t", ["fine"]) == 0
    assert run(app, "t", ["bad"]) == 2
    assert capsys.readouterr().err == "t: error: no such thing\n"
    assert run(app, "t", ["no-such-command"]) == 2
