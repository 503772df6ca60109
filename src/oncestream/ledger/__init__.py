"""Processing ledgers: where applied messages are recorded, atomically with their effects.

``SQLiteLedger`` (embedded default) and ``PostgresLedger`` (psycopg 3, imported
lazily) share the :class:`Ledger` contract. :func:`ledger_from_url` builds one
from ``sqlite:///path/to/file.db`` or ``postgresql://...``.
"""

from __future__ import annotations

from .._errors import ConfigError
from .._private import redact
from ._base import KeyMode, Ledger, LedgerEntry, LedgerTx
from .postgres import PostgresLedger
from .sqlite import SQLiteLedger

__all__ = [
    "KeyMode",
    "Ledger",
    "LedgerEntry",
    "LedgerTx",
    "PostgresLedger",
    "SQLiteLedger",
    "ledger_from_url",
]


def ledger_from_url(url: str, *, key: KeyMode = "sequence") -> Ledger:
    """Build a ledger from a URL.

    ``sqlite:///abs/path.db`` or ``sqlite://relative.db`` (``sqlite:////abs`` works
    too); ``postgresql://user@host:port/db`` (or ``postgres://``).

    Raises:
        ConfigError: for any other scheme or an empty path.
    """
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if not path or path == "/":
            raise ConfigError(f"ledger URL {url!r} names no file; use sqlite:///path/to/file.db")
        return SQLiteLedger(path, key=key)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresLedger(url, key=key)
    raise ConfigError(
        f"ledger URL {redact(url)!r} has an unsupported scheme; it must start with "
        "sqlite:// or postgresql:// (sqlite:///path/to/file.db, postgresql://user@host/db)"
    )
