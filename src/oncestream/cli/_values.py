"""The range every integer and number option of the CLI has, whatever the command.

click takes any Python integer for an ``int`` option and ``nan``, ``inf`` or
``1e400`` for a ``float`` one. An integer over 64 bits then fails to encode
(``TypeError: Integer exceeds 64-bit range``, a traceback) and a ``nan``
timeout never ends. :func:`bound_numbers` gives every such option of the
command tree the checks of the one parser of its kind
(:func:`oncestream._options.parse_int`; a finite number), so an option added
later has them too. A bad value is a usage error: exit 2, naming the option,
the value and what is allowed.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from typing import Any

import typer

from .._errors import ConfigError
from .._options import parse_int

__all__ = ["bound_numbers", "number_kind"]

Callback = Callable[[Any, Any, Any], Any]


def _flag(param: Any) -> str:
    opts = [o for o in getattr(param, "opts", None) or [] if o.startswith("-")]
    return max(opts, key=len) if opts else str(param.name).upper()


def number_kind(param: Any) -> type | None:
    """``int`` or ``float`` when ``param`` takes one (``X | None`` included), else None."""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    for arg in typing.get_args(annotation) or (annotation,):
        if arg is int or arg is float:
            return arg
    return None


def _check(value: Any, param: Any) -> None:
    if value is None or isinstance(value, bool):
        return
    for number in value if isinstance(value, list | tuple) else (value,):
        if isinstance(number, int):
            try:
                parse_int(_flag(param), number)
            except ConfigError as exc:
                raise typer.BadParameter(str(exc), param=param) from None
        elif isinstance(number, float) and not math.isfinite(number):
            raise typer.BadParameter(
                f"{_flag(param)} must be a finite number, got {number!r}", param=param
            )


def _checked(callback: Callback | None) -> Callback:
    def check_then_call(ctx: Any, param: Any, value: Any) -> Any:
        _check(value, param)
        return value if callback is None else callback(ctx, param, value)

    check_then_call.bounded = True  # type: ignore[attr-defined]
    return check_then_call


def bound_numbers(command: Any) -> None:
    """Give every ``int`` / ``float`` parameter of ``command`` and its sub-commands the checks."""
    for param in getattr(command, "params", []):
        if number_kind(param) is not None and not getattr(param.callback, "bounded", False):
            param.callback = _checked(param.callback)
    for sub in getattr(command, "commands", {}).values():
        bound_numbers(sub)
