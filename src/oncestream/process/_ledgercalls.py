"""The ledger's one connection as a Processor's parts share it: one call at a time, off the loop.

A ledger has one database connection. Batch transactions (:mod:`._applying`), the
registry (:mod:`._registry`), pruning, a takeover's fence (:mod:`._pinning`) and
opening and closing all go through one :class:`LedgerCalls`, which runs them on a
worker thread one at a time: each may wait for another process's lock on the
database (SQLite's busy timeout blocks the calling thread) while the event loop
keeps running. Built once per ledger, so that several consumers applied by one
process on one ledger (the partitions a member of a group owns) share its lock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from .._errors import LedgerError, LedgerUnusable
from .._retry import retrying
from ..ledger import Ledger
from ._options import ProcessorStats

__all__ = ["RETRY_DELAY", "WAIT_NOTICE", "LedgerCalls", "is_lock_wait"]

log = logging.getLogger(__name__)

#: Seconds before a step that waits for another process (a locked ledger, a consumer
#: reset that failed) is tried again.
RETRY_DELAY = 0.5
#: Seconds between the lines saying that something (opening the ledger, a takeover)
#: still waits.
WAIT_NOTICE = 10.0


def is_lock_wait(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what caused it) is a lock wait that ran out.

    SQLite: SQLITE_BUSY / SQLITE_LOCKED; PostgreSQL: lock_not_available (55P03,
    from ``lock_timeout``).
    """
    while exc is not None:
        if getattr(exc, "sqlstate", None) == "55P03":
            return True
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (5, 6):
            return True
        exc = exc.__cause__
    return False


class LedgerCalls:
    """Runs ledger calls on a worker thread, one at a time.

    Args:
        ledger: the ledger whose connection the calls share.

    Example::

        calls = LedgerCalls(SQLiteLedger("billing.db"))
        await calls.open("ORDERS/billing", stats, lambda: False)
        rows = await calls.db(calls.ledger.registrations, "ORDERS")
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        #: Serialises ledger calls (transactions, pruning) on the one connection.
        self.lock = asyncio.Lock()

    async def db(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run a ledger call other than a batch (open, prune, close) on the ledger's thread.

        Each may wait for another process's lock on the database (SQLite's busy
        timeout blocks the calling thread); the event loop keeps running meanwhile.
        A cancelled caller holds the lock until the thread's call has returned
        (:meth:`Ledger.call`), so nothing else uses or closes the connection under it.
        """
        async with self.lock:
            return await self.ledger.call(func, *args)

    async def open(self, who: str, stats: ProcessorStats, stopping: Callable[[], bool]) -> bool:
        """Open the ledger; False when a stop was requested while it was locked.

        A lock held by another process (an instance frozen inside a batch, long
        batches, a backup) is waited for, logged (naming ``who``), never fatal: a
        standby that exits here would be missing when it is needed.

        Raises:
            LedgerUnusable: the database is corrupt, not a database, or read-only.
            LedgerError: it cannot be opened for another reason.
        """
        began, noticed = time.monotonic(), 0.0

        def locked(exc: BaseException) -> bool:
            return (
                isinstance(exc, LedgerError)
                and not isinstance(exc, LedgerUnusable)
                and is_lock_wait(exc)
            )

        async def waiting(exc: BaseException) -> None:
            nonlocal noticed
            now = time.monotonic()
            if not noticed or now - noticed >= WAIT_NOTICE:
                noticed = now
                log.warning(
                    "%s: cannot open the ledger yet, another process holds its lock "
                    "(%.0fs so far; an instance frozen inside a batch, or busy with a "
                    "long one?); waiting: %s",
                    who,
                    now - began,
                    exc,
                )
            stats.ledger_errors += 1

        try:
            await retrying(
                functools.partial(self.db, self.ledger.open),
                budget=None,
                what="opening the ledger",
                retry_if=lambda exc: locked(exc) and not stopping(),
                on_retry=waiting,
                delay=lambda _attempt: RETRY_DELAY,
                log_retries=False,
            )
        except LedgerError as exc:
            if locked(exc) and stopping():
                return False
            raise
        return True
