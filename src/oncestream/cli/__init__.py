"""The ``oncestream`` command line.

Each sub-command lives in its own module and registers itself on the shared
Typer app; importing the module is what adds the command.
"""

from __future__ import annotations

from . import _server  # noqa: F401
from ._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``oncestream`` console script."""
    app()
