"""Tables at a terminal and in a file: the terminal's width when interactive (never a row the
terminal wraps, never a figure cut), every row on one line when piped, boxes only for tables that
fit 80 columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import rich.console
from rich.table import Table

from conftest import tiny_trace
from ecosim.cli import main
from ecosim.cli.tables import PIPED_WIDTH, TableConsole, wide_console
from ecosim.trace.io import write_trace

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ARGS = ["--policy", "ar,confidence,ecospec-auto", "--bw", "3.3TB/s"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("traces")
    write_trace(d / "a-long-trace-name", *tiny_trace(11))
    write_trace(d / "b", *tiny_trace(12, requests=3))
    return d


def _replay(traces: Path, capsys) -> list[str]:
    assert main(["replay", str(traces), *ARGS]) == 0
    return [ANSI.sub("", line).rstrip() for line in capsys.readouterr().out.splitlines()]


def _at_terminal(monkeypatch, columns: int) -> None:
    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    monkeypatch.setenv("COLUMNS", str(columns))


def _figures(lines: list[str]) -> list[str]:
    return sorted(w for line in lines for w in line.split() if re.fullmatch(r"[\d,.]+x?", w))


def test_piped_every_row_is_one_line_drawn_compact(traces, capsys):
    assert wide_console().width == PIPED_WIDTH  # pytest's capture is not a terminal
    lines = _replay(traces, capsys)
    row = next(line for line in lines if "confidence b=16" in line)
    assert len(row.split()) == 2 + 7  # policy label (2 words) and its seven figures on the same line
    assert not any(c in "".join(lines) for c in "│┃┏")  # wider than 80 columns: no vertical rules
    assert not any("…" in line for line in lines)


@pytest.mark.parametrize("columns", [80, 60])
def test_at_a_narrow_terminal_no_line_is_wider_and_no_figure_is_cut(traces, capsys, monkeypatch, columns):
    piped = _replay(traces, capsys)
    _at_terminal(monkeypatch, columns)
    assert wide_console().width == columns
    shown = _replay(traces, capsys)
    assert max(len(line) for line in shown) <= columns
    assert not any("…" in line for line in shown)
    rows = [x for x in piped if not x.startswith(("used:", "not modelled"))]
    assert set(_figures(rows)) <= set(_figures(shown))  # every figure of the table is shown, whole
    if columns >= 80:
        assert any("ecospec-auto token calibrated" in line for line in shown)  # a row's name is whole at 80


def test_at_a_wide_terminal_the_table_is_one_piece(traces, capsys, monkeypatch):
    _at_terminal(monkeypatch, 200)
    shown = _replay(traces, capsys)
    assert sum("continued" in line for line in shown) == 0
    assert max(len(line) for line in shown) <= 200


def test_a_table_that_fits_80_columns_keeps_its_boxes():
    t = Table("candidate", "ms/token")
    t.add_row("ar", "0.3059")
    console = TableConsole(width=PIPED_WIDTH, record=True, file=open("/dev/null", "w"))
    console.print(t)
    assert "┃" in console.export_text()
