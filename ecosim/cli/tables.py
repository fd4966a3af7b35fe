"""How the commands' tables meet a terminal or a file.

A table that fits 80 columns keeps its boxes. A wider one is drawn compact: a rule under the header
only and two spaces between columns. Piped or redirected, the console is wide enough that every row
stays on one line (grep, diff and a README block see whole rows). At a terminal still narrower than
the compact table, it is split into parts that each fit: the leading columns that name a row (the
left-justified ones: trace, policy, ...) are repeated in every part, the figures are shared out
among the parts in order, so no figure is cut (at a very narrow terminal the widest name column
wraps its words).
"""

from __future__ import annotations

import copy
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Column, Table
from rich.text import Text

COMPACT_ABOVE = 80  # columns: a table wider than this is drawn compact
PIPED_WIDTH = 10_000  # columns when not a terminal: every row on one line
GAP = 2  # spaces between two columns of a compact table: the box's blank divider and one of padding


def _width(cell: Any, console: Console) -> int:
    if isinstance(cell, str):
        return max((Text.from_markup(line).cell_len for line in cell.splitlines() or [""]), default=0)
    return console.measure(cell, options=console.options.update_width(PIPED_WIDTH)).maximum


def column_width(col: Column, console: Console) -> int:
    """The widest of a column's header and cells, in terminal cells."""
    return max([_width(col.header, console), *(_width(c, console) for c in col._cells)])


def _light(table: Table) -> Table:
    table.box, table.show_edge, table.pad_edge, table.padding = box.SIMPLE_HEAD, False, False, (0, GAP - 1, 0, 0)
    return table


def _part(table: Table, columns: list[int], title: Any) -> Table:
    """A table of the given columns of `table` (same rows, sections and styles), drawn compact."""
    t = Table(title=title, title_justify=table.title_justify, header_style=table.header_style)
    for i in columns:
        col = copy.copy(table.columns[i])
        col._cells = list(col._cells)
        t.columns.append(col)
        col._index = len(t.columns) - 1
    t.rows = list(table.rows)
    return _light(t)


def compact(table: Table, console: Console) -> RenderableType:
    """`table` as it should be drawn on `console` (see the module's docstring)."""
    if console.measure(table, options=console.options.update_width(PIPED_WIDTH)).maximum <= COMPACT_ABOVE:
        return table
    widths = [column_width(c, console) for c in table.columns]
    if sum(widths) + GAP * (len(widths) - 1) <= console.width or len(widths) < 2:
        return _light(table)
    keys = 0
    while keys < len(table.columns) - 1 and table.columns[keys].justify == "left":
        keys += 1
    keys = max(keys, 1)
    deficit = sum(widths[:keys]) + GAP * keys + max(widths[keys:]) - console.width
    if deficit > 0:  # the names alone leave no room: the widest name column wraps its words
        wide = max(range(keys), key=lambda i: widths[i])
        widths[wide] = max(widths[wide] - deficit, 4)
        table.columns[wide].max_width = widths[wide]
    room = console.width - sum(widths[:keys]) - GAP * keys
    parts: list[list[int]] = [[]]
    used = 0
    for i in range(keys, len(widths)):
        if parts[-1] and used + widths[i] > room:
            parts.append([])
            used = 0
        parts[-1].append(i)
        used += widths[i] + GAP
    head = list(range(keys))
    return Group(*(_part(table, head + p, table.title if n == 0 else f"({n + 1}/{len(parts)}, continued)")
                   for n, p in enumerate(parts)))


class TableConsole(Console):
    """A console that draws each table it prints the way `compact` says."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(part for o in objects for part in self._parts(o)), **kwargs)

    def _parts(self, o: Any) -> list[Any]:
        """A table's left-justified title is a line of its own, wrapped at the console's width, not
        the table's (a title longer than its table would break mid-sentence)."""
        if not isinstance(o, Table):
            return [o]
        if isinstance(o.title, str) and o.title_justify == "left":
            title, o.title = o.title, None  # the table is printed once, without it
            return [Text.from_markup(title, style="table.title"), compact(o, self)]
        return [compact(o, self)]


def wide_console() -> Console:
    """The console every command prints its tables and lines on: the terminal's width when
    interactive; piped or redirected, wide enough that no row or line wraps."""
    probe = Console()
    return TableConsole(width=probe.width if probe.is_terminal else PIPED_WIDTH)
