"""The shared Typer app, consoles and error handling for every CLI command."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console

from .._errors import (
    AuthenticationError,
    ConfigError,
    ConsumerNotFound,
    LedgerUnusable,
    OncestreamError,
    PermissionDenied,
    StreamNotFound,
)

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "app", "console", "err_console", "fail", "run_async"]

T = TypeVar("T")

EXIT_FAILURE = 1
EXIT_CONFIG = 2

app = typer.Typer(
    name="oncestream",
    help="Exactly-once pipelines on NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = EXIT_FAILURE) -> typer.Exit:
    """Print ``message`` in red on stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


#: Errors the user fixes by changing the command or its configuration: exit 2.
#: Every other oncestream error means the work failed: exit 1.
USAGE_ERRORS: tuple[type[OncestreamError], ...] = (
    ConfigError,
    StreamNotFound,
    ConsumerNotFound,
    AuthenticationError,
    PermissionDenied,
    LedgerUnusable,
)


def exit_code_for(exc: OncestreamError) -> int:
    """The exit code rule: 2 for bad usage or configuration, 1 for failed work."""
    return EXIT_CONFIG if isinstance(exc, USAGE_ERRORS) else EXIT_FAILURE


def cli_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Turn oncestream errors into a one-line message and the exit code of the rule.

    0 ok, 1 the work failed, 2 bad usage or configuration (see :data:`USAGE_ERRORS`).
    A file the command cannot open is bad usage too (exit 2), never a traceback.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            raise fail(str(exc), EXIT_CONFIG) from None
        except OncestreamError as exc:
            kind = "" if type(exc) is OncestreamError else f"{type(exc).__name__}: "
            raise fail(f"{kind}{exc}", exit_code_for(exc)) from None
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise fail(f"{where}{exc.strerror or exc}", EXIT_CONFIG) from None

    return wrapper


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; the command's :func:`cli_errors` translates its errors."""
    return asyncio.run(coro)


def setup_logging(verbose: bool) -> None:
    """Log to stderr through rich, INFO by default and DEBUG with ``--verbose``."""
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False)],
    )
    logging.getLogger("nats").setLevel(logging.WARNING)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    """Exactly-once pipelines on NATS JetStream."""
    setup_logging(verbose)
