"""The shared Typer app, consoles and error handling for every CLI command."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console

from .._errors import ConfigError, OncestreamError

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


def cli_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Turn oncestream errors into a one-line message and a non-zero exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            raise fail(str(exc), EXIT_CONFIG) from None
        except OncestreamError as exc:
            raise fail(f"{type(exc).__name__}: {exc}") from None

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
