"""Processing ledgers: where applied messages are recorded, atomically with their effects.

``SQLiteLedger`` (embedded default) and ``PostgresLedger`` (psycopg 3, imported
lazily) share the :class:`Ledger` contract. :func:`ledger_from_url` builds one
from ``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``postgresql://...``.
"""

from ._base import Horizon, KeyMode, Ledger, LedgerEntry, LedgerTx, Registration
from ._from_url import ledger_from_url
from ._postgres import PostgresLedger
from ._sqlite import SQLiteLedger

__all__ = [
    "Horizon",
    "KeyMode",
    "Ledger",
    "LedgerEntry",
    "LedgerTx",
    "PostgresLedger",
    "Registration",
    "SQLiteLedger",
    "ledger_from_url",
]
