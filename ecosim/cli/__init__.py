"""The `ecosim` command line: one typer app, one module per group of commands.

Every user error (a bad path, value, unit or trace) is one line on stderr and exit status 2,
never a traceback; `--help` on every command says what each option means. `make_app` and `run`
are shared by the three programs (`ecosim`, `tracer`, `validate`): one look (rich help panels,
readable at 80 columns) and one way to report errors and interrupts.
"""

from __future__ import annotations

import shlex
import signal
import sys
import warnings
import threading
from collections.abc import Sequence
from typing import NoReturn

import typer

from ecosim.cli.tables import wide_console  # noqa: F401  (every command prints its tables through it)
from ecosim.errors import EcoSimError, InternalError
from ecosim.gate.values import EcoSimWarning

_show = warnings.showwarning

try:  # typer >= 0.20 vendors its own copy of click; its exceptions are the ones raised
    from typer._click import exceptions as click
except ImportError:  # pragma: no cover - older typer on the real click
    from click import exceptions as click  # type: ignore[no-redef]



def make_app(name: str, help: str) -> typer.Typer:
    """A typer app with the settings every program and command group shares.

    Help is click's plain layout: typer's rich panels squeeze six columns into 80 and cut option
    names (`--compute-efficie…`), and their markup eats bracketed text such as `[top_k, ...]`.
    """
    return typer.Typer(name=name, help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None)


app = make_app("ecosim", "Trace-driven simulator of cost-aware speculative decoding on Mixture-of-Experts models.")


def fail(message: str) -> None:
    """Report a user error the one way the CLI does."""
    raise EcoSimError(message)


def joined(values: Sequence[str] | None) -> str | None:
    """A list option's values as the one comma list its parser reads.

    Every option that takes a list takes it both ways, on every command: repeated
    (`--policy ar --policy confidence`) and comma-listed (`--policy ar,confidence`), or mixed.
    None (not given) stays None; an empty item reaches the parser, which names it."""
    return ",".join(values) if values else None


def listed(values: Sequence[str] | None, flag: str) -> list[str]:
    """A list option's items (repeats and comma lists alike, see `joined`); an empty item is one line."""
    text = joined(values)
    if text is None:
        return []
    items = [s.strip() for s in text.split(",")]
    if not all(items):
        fail(f"{flag} {text!r}: empty item; expected a comma list")
    return items


def interrupted(prog: str, message: str) -> NoReturn:
    """Ctrl-C during long work: one line saying what was kept and how to resume, exit status 130.

    Called inside the command: typer turns a KeyboardInterrupt into exit status 130 on its own,
    before `run` could say anything."""
    _say(prog, message)
    raise typer.Exit(130)


def _say(prog: str, text: str) -> None:
    print(f"{prog}: {' '.join(text.split())}", file=sys.stderr)  # always one line


_RUNNING: list[str] = []  # the command line `run` is running, for `command_line`


def command_line() -> str:
    """The command being run, as a shell line a user can paste to run it again (a resume)."""
    return shlex.join(_RUNNING)


def run(app: typer.Typer, prog: str, argv: list[str] | None = None) -> int:
    """Run a typer app; user errors become one line on stderr and exit status 2, naming the help
    of the command that was run (`see 'ecosim replay --help'`); Ctrl-C is exit status 130.

    With standalone_mode=False, click does not raise a command's `typer.Exit(n)` (nor `ctx.exit(n)`)
    to us: it returns n. That return value is the exit status; anything else a command returns
    (our commands return None) means success.
    """
    _RUNNING[:] = [prog, *(sys.argv[1:] if argv is None else argv)]
    previous = _terminate_as_exit()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default", EcoSimWarning)  # each warning once
            warnings.showwarning = lambda message, category, *a, **k: (  # type: ignore[assignment]
                _say(prog, f"warning: {message}") if issubclass(category, EcoSimWarning) else _show(message, category, *a, **k))
            refuse_empty(sys.argv[1:] if argv is None else argv)
            rv = app(args=argv, prog_name=prog, standalone_mode=False)
    except EcoSimError as e:
        _say(prog, f"error: {e}")
        return 2
    except InternalError as e:  # never a printed number: what went in, to report
        _say(prog, f"internal error (please report): {e}")
        return 70
    except getattr(click, "NoArgsIsHelpError", ()) as e:  # a bare command: its help
        try:
            print(e.ctx.get_help() if e.ctx is not None else f"usage: {prog} COMMAND --help")
        except BrokenPipeError:
            pass
        return 0
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else prog
        _say(prog, f"error: {e.format_message()} (see '{where} --help')")
        return 2
    except click.ClickException as e:
        _say(prog, f"error: {e.format_message()}")
        return 2
    except (typer.Abort, KeyboardInterrupt):
        _say(prog, "interrupted")
        return 130
    except typer.Exit as e:
        return e.exit_code
    except BrokenPipeError:
        return 0
    finally:
        _restore_terminate(previous)
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def refuse_empty(args: list[str]) -> None:
    """An empty (or blank) argument is never "not given": `ecosim replay ""` would replay the current directory,
    `--bw ""` would keep the device's bandwidth. Refused before anything runs, naming the option."""
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if a.startswith("--") and eq and not value.strip():
            raise EcoSimError(f"{flag} is given an empty value; give one (see '--help'), or leave the option out")
        if not a.strip():
            after = args[i - 1] if i and args[i - 1].startswith("-") else None
            what = f"{after} is given an empty value" if after else f"argument {i + 1} is an empty string"
            raise EcoSimError(f"{what}; an empty string never means 'not given': give a value or leave it out")


TERMINATED = 128 + signal.SIGTERM  # the exit status of a command stopped by SIGTERM, as a shell reports it


def _terminate_as_exit() -> object:
    """SIGTERM raises SystemExit(143) in the main thread instead of killing the process outright,
    so every `finally` and context manager runs: a kernel is shut down, temporary files and
    directories are removed (`kill PID` leaves nothing behind, like Ctrl-C). Returns the previous
    handler; outside the main thread (a test calling `main`) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(TERMINATED)

    return signal.signal(signal.SIGTERM, stop)


def _restore_terminate(previous: object) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    from ecosim.cli import fidelity, predictor, replay, report, routing, sweep, traces, tune  # noqa: F401  (each module registers its commands)

    return run(app, "ecosim", argv)
