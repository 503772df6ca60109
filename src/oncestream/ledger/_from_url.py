"""A ledger from a database URL (SQLite path or PostgreSQL URL), with SQLAlchemy's meaning."""

from __future__ import annotations

from .._dsn import Dsn, parse_dsn
from ._base import KeyMode, Ledger
from ._postgres import PostgresLedger
from ._sqlite import SQLiteLedger

__all__ = ["ledger_from_dsn", "ledger_from_url"]


def ledger_from_url(url: str, *, key: KeyMode = "sequence") -> Ledger:
    """Build a ledger from a database URL, with SQLAlchemy's meaning.

    ``sqlite:///relative/path.db`` (three slashes: relative to the working
    directory), ``sqlite:////absolute/path.db`` (four slashes), a plain file
    path, or ``postgresql://user@host:port/db`` (``postgres://`` too). The
    same forms mean the same files for ``oncestream audit`` and
    ``foreachBatch`` (see :mod:`oncestream._dsn`).

    Raises:
        ConfigError: for any other form, naming the (redacted) URL and the allowed forms.

    Example::

        ledger = ledger_from_url("sqlite:///orders.db")  # ./orders.db
    """
    return ledger_from_dsn(parse_dsn(url, "ledger URL"), key=key)


def ledger_from_dsn(dsn: Dsn, *, key: KeyMode = "sequence", tables: bool = True) -> Ledger:
    """The ledger for an already parsed database URL (``tables=False``: transactions only)."""
    if dsn.kind == "postgresql":
        return PostgresLedger(dsn.url, key=key, tables=tables)
    assert dsn.path is not None
    return SQLiteLedger(dsn.path, key=key, tables=tables)
