"""Output helpers shared by the CLI verbs: tables that never truncate off a terminal, JSON,
and the confirmation that destructive verbs ask for."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._errors import ConfigError
from ._app import console

__all__ = [
    "cell",
    "confirm",
    "fmt",
    "kv_table",
    "print_json",
    "print_output",
    "print_table",
    "rows_table",
]


def fmt(value: Any) -> str:
    """One cell: thousands separators for integers, lists joined, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


class RowsTable(Table):
    """A table built from row dicts, which it keeps for the narrow-terminal record view."""

    records: Sequence[dict[str, Any]] = ()


def cell(value: Any) -> Text:
    """:func:`fmt` as literal text: a value holding ``[...]`` (a subject, a description,
    a file name) is shown as it is, never read as rich markup."""
    return Text(fmt(value))


def rows_table(title: str, rows: Sequence[dict[str, Any]], *, empty: str = "none") -> Table | str:
    """A table of ``rows`` (dicts with the same keys), or a one-line note when there are none.

    Titles, headers and cells are literal text (see :func:`cell`).
    """
    if not rows:
        return f"{title}: {empty}"
    table = RowsTable(title=Text(title), title_justify="left")
    table.records = rows
    for column in rows[0]:
        numeric = isinstance(rows[0][column], int | float) and not isinstance(rows[0][column], bool)
        table.add_column(Text(column), justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*[cell(v) for v in row.values()])
    return table


def kv_table(title: str, pairs: dict[str, Any]) -> Table:
    """A two-column key/value table (``stream info``, ``consumer info``), literal text."""
    table = Table(title=Text(title), title_justify="left", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in pairs.items():
        table.add_row(Text(key), cell(value))
    return table


def print_table(renderable: Table | str, out: Console | None = None) -> None:
    """Print a table: fitted to a terminal, at its full natural width otherwise.

    Off a terminal (a pipe, a file, a CI log) rich would cut to 80 columns
    (``consum…``); there the table is printed as wide as it needs.
    """
    target = out or console
    if isinstance(renderable, str):
        target.print(renderable, markup=False, highlight=False)
        return
    width = target.measure(renderable, options=target.options.update(width=100_000)).maximum
    if target.is_terminal:
        if width > target.width and isinstance(renderable, RowsTable) and renderable.records:
            # Too wide to read when squeezed: one key/value block per row instead.
            title = str(renderable.title or "")
            for index, record in enumerate(renderable.records, 1):
                target.print(kv_table(f"{title} ({index}/{len(renderable.records)})", record))
            return
        target.print(renderable)
        return
    wide = Console(
        file=target.file, width=max(width, 20), no_color=True, highlight=False, soft_wrap=False
    )
    wide.print(renderable)


def print_json(data: Any) -> None:
    """Indented JSON on stdout (what ``--json`` prints)."""
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode())


def print_output(data: Any, as_json: bool, human: Table | str) -> None:
    """``data`` as JSON with ``--json``, else ``human`` (a table, or one line printed as is)."""
    if as_json:
        print_json(data)
    else:
        print_table(human)


def confirm(question: str, *, force: bool, what: str) -> None:
    """Ask before a destructive action unless ``force``.

    Raises:
        ConfigError: stdin is not a terminal and ``--force`` was not given
            (exit 2: a script must say ``--force`` explicitly), or the user said no.
    """
    if force:
        return
    if not sys.stdin.isatty():
        raise ConfigError(f"refusing to {what} without --force: stdin is not a terminal")
    if not typer.confirm(question, default=False):
        raise ConfigError(f"not confirmed: {what} cancelled")
