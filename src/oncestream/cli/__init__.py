"""The ``oncestream`` command line.

Each sub-command lives in its own module and registers itself on the shared
Typer app; importing the module is what adds the command.
"""

from __future__ import annotations

from . import (
    _audit,  # noqa: F401
    _consumer,  # noqa: F401
    _consumer_edit,  # noqa: F401
    _consumer_reset,  # noqa: F401
    _demo,  # noqa: F401
    _dlq,  # noqa: F401
    _doctor,  # noqa: F401
    _metrics,  # noqa: F401
    _process,  # noqa: F401
    _publish,  # noqa: F401
    _server,  # noqa: F401
    _status,  # noqa: F401
    _stream,  # noqa: F401
    _tail,  # noqa: F401
    _topology,  # noqa: F401
)
from ._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``oncestream`` console script."""
    app()
