"""How ``--help`` reads: plain text that wraps, never truncates; metavars that name the value.

Typer's rich help panels cut option names and defaults to fit 80 columns
(``--max-msgs-per-s…``) and show Python types as metavars (``<int>``,
``<list[str]>``). Every ``oncestream`` command uses click's plain formatter,
which wraps, and this module names each value: ``N`` for integers, ``X``
for numbers, a word taken from the option (``--ack-timeout TIMEOUT``), the
choices for enums (``stop|skip``). ``scripts/cli_table.py`` builds docs/cli.md's
command table with the same names.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

import typer
import typer.core

from ._values import bound_numbers

__all__ = ["HelpGroup", "metavar", "new_typer"]


def metavar(param: Any) -> str:
    """The metavar of a parameter that takes a value (its own when it has one)."""
    if getattr(param, "metavar", None):
        return str(param.metavar)
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if annotation is None and hasattr(param, "type"):  # plain click parameters
        annotation = {"integer": int, "float": float}.get(getattr(param.type, "name", ""))
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            return "|".join(str(member.value) for member in arg)
    text = str(annotation)
    if annotation is int or "int" in text.split("[")[-1].split("|")[0]:
        return "N"
    if annotation is float or "float" in text:
        return "X"
    if not getattr(param, "opts", None) or not str(param.opts[0]).startswith("-"):
        return str(param.name).upper()
    word = str(param.opts[0]).lstrip("-").split("-")[-1]
    return word.upper()


def _no_type(ctx: Any) -> None:
    return None


def _name_values(command: Any) -> None:
    for param in command.params:
        if getattr(param, "name", None) == "help":
            continue
        if hasattr(param, "is_flag"):  # an option
            if not param.is_flag and not param.count and param.metavar is None:
                param.metavar = metavar(param)
        else:  # an argument: its name is its metavar; no Python type beside it
            if param.metavar is None:
                param.metavar = str(param.name).upper()
            param.display_type_rich = _no_type
    for sub in getattr(command, "commands", {}).values():
        _name_values(sub)


def _format_commands(group: Any, ctx: Any, formatter: Any) -> None:
    """Each command with its whole summary, wrapped (click cuts it with "..." at 80 columns)."""
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        summary = (command.help or command.short_help or "").strip().split("\n\n")[0]
        rows.append((name, " ".join(summary.split())))
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class HelpGroup(typer.core.TyperGroup):
    """The root command group: names every value of the whole command tree once built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _name_values(self)
        bound_numbers(self)
        _whole_summaries(self)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        _format_commands(self, ctx, formatter)


def _whole_summaries(group: Any) -> None:
    for command in getattr(group, "commands", {}).values():
        if hasattr(command, "commands"):
            command.format_commands = lambda ctx, formatter, g=command: _format_commands(
                g, ctx, formatter
            )
            _whole_summaries(command)


def new_typer(**kwargs: Any) -> typer.Typer:
    """A Typer app with plain, wrapping help (the root one and every sub-command group)."""
    kwargs.setdefault("no_args_is_help", True)
    return typer.Typer(rich_markup_mode=None, **kwargs)
