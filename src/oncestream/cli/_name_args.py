"""Typer callbacks that check stream, consumer and subject names while the command line is parsed.

A bad name is a usage error (exit 2) before any connection is made, with
nats-server's rule in the message (see :mod:`oncestream._names`)::

    Name = Annotated[str, typer.Argument(help="Stream name.", callback=stream_name)]
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from .._errors import ConfigError
from .._names import (
    check_consumer_name,
    check_publish_subject,
    check_stream_name,
    check_subject_filter,
)

__all__ = ["consumer_name", "publish_subject", "stream_name", "subject_filter"]


def _checked(check: Callable[[object, str], str], value: str | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        return check(value, what)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix(f"{what}: ")) from None


def stream_name(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Callback: a stream name (nats-server's rules)."""
    return _checked(check_stream_name, value, param.name or "stream")


def consumer_name(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Callback: a consumer (durable) name."""
    return _checked(check_consumer_name, value, param.name or "consumer")


def subject_filter(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Callback: a subject or subject filter (wildcards allowed)."""
    return _checked(check_subject_filter, value, param.name or "subject")


def publish_subject(
    ctx: typer.Context, param: typer.CallbackParam, value: str | None
) -> str | None:
    """Callback: a subject to publish to (no wildcards)."""
    return _checked(check_publish_subject, value, param.name or "subject")
