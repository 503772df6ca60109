"""Active/standby Processors: a pinned priority group, fenced by the ledger.

With ``ProcessorOptions(priority_group=..., policy="pinned")`` the server
delivers to one instance at a time (the pinned client, ADR-42): the others
keep a pull request waiting and get nothing. When the active instance sends no
pull request for the consumer's ``priority_timeout`` (``pinned_ttl``: killed,
frozen, cut off), the server gives a new pin to a waiting standby with the
next message it delivers. That standby takes over in three steps, before it
applies anything:

1. **fence**: it writes its pin as the owner of the consumer into the ledger.
   Every batch of a pinned Processor checks, inside its ledger transaction,
   that it is still the owner; a frozen active instance that wakes up rolls its
   batch back and becomes a standby instead of applying behind the new one.
   The check holds its row until the batch commits (PostgreSQL ``FOR SHARE``;
   SQLite's write transaction), so a takeover waits for a batch that passed it.
2. **reset**: it resets the consumer to its ack floor (``CONSUMER.RESET``,
   server 2.14+). Messages the old instance held unacknowledged are delivered
   again at once and in stream order, instead of after their ack wait behind
   newer ones: per-subject order is kept across the switch. The ledger
   acknowledges the ones already applied without applying them again.
3. **re-subscribe**: it pulls on a fresh inbox with the new pin, so nothing
   delivered before the reset reaches it.

A fence that cannot be written yet is not a failure. Another process may hold
the ledger's lock: the old active instance frozen inside a batch (SIGSTOP, a
stuck VM) or still busy with long batches. The standby then keeps its pin
(a one-message pull request under it every ``pinned_ttl / 3``, whatever it
delivers is dropped and comes again with the reset), retries the fence with
bounded waits (:func:`take_over` with ``wait``, :class:`FenceBusy` when the
lock stays held) and takes over as soon as the lock is free; it stays a
standby if the pin moves on meanwhile. PostgreSQL ends a frozen session's
transaction after ``idle_in_transaction_session_timeout``, so the takeover
waits that long at most. SQLite cannot take a lock from a frozen process: the
takeover waits until the old instance resumes (its batch in flight commits,
before the new one applies anything; its next batch fails the owner check) or
dies (its batch is rolled back).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from .._connection import Connection
from .._errors import LedgerError, LedgerUnusable, OncestreamError
from ..ledger import Ledger, LedgerTx, PostgresLedger, SQLiteLedger
from ..streams import require_server
from ..streams._internal import RESET_SINCE

__all__ = [
    "FenceBusy",
    "OwnerCheck",
    "Superseded",
    "fence_name",
    "is_lock_wait",
    "require_reset",
    "reset_to_ack_floor",
    "take_over",
]

log = logging.getLogger("oncestream.processor")

_TABLE = "oncestream_owners"


class Superseded(OncestreamError):
    """Another instance took over the consumer: this batch was rolled back, not applied."""


class FenceBusy(LedgerError):
    """Another process held the ledger's lock for the whole wait: the fence is not written yet."""


def fence_name(stream: str, consumer: str, group: str) -> str:
    """The ledger row naming who may apply for ``stream``/``consumer`` in ``group``."""
    return f"{stream}/{consumer}/{group}"


def take_over(ledger: Ledger, name: str, pin: str, *, wait: float | None = None) -> str | None:
    """Record ``pin`` as the owner of ``name``; return the previous owner.

    Waits for a batch of the previous owner that already passed its check: at
    most ``wait`` seconds when given (SQLite and PostgreSQL ledgers), otherwise
    as long as the ledger waits for a lock (SQLite's busy timeout).

    Raises:
        FenceBusy: the lock stayed held for ``wait`` seconds; nothing was written.
        LedgerUnusable: the database cannot be used.
        LedgerError: another database failure (the caller may retry).
    """
    p = ledger.placeholder
    try:
        with _lock_wait(ledger, wait), ledger.transaction() as tx:
            if wait is not None and isinstance(ledger, PostgresLedger):
                tx.execute(f"SET LOCAL lock_timeout = {max(1, int(wait * 1000))}")
            tx.execute(
                f"CREATE TABLE IF NOT EXISTS {_TABLE} (name TEXT PRIMARY KEY, owner TEXT NOT NULL)"
            )
            row = tx.execute(f"SELECT owner FROM {_TABLE} WHERE name = {p}", (name,)).fetchone()
            tx.execute(
                f"INSERT INTO {_TABLE} (name, owner) VALUES ({p}, {p}) "
                "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner",
                (name, pin),
            )
    except LedgerUnusable:
        raise
    except Exception as exc:
        if is_lock_wait(exc):
            raise FenceBusy(
                f"{name}: the ledger {ledger!r} is locked by another process (an instance "
                f"frozen inside a batch, or busy with one); the fence waits for it"
            ) from exc
        if isinstance(exc, LedgerError):
            raise
        if ledger.is_unusable(exc):
            raise ledger.failure("takeover", exc) from exc
        raise LedgerError(f"{name}: the takeover could not write the ledger: {exc}") from exc
    return None if row is None else str(row[0])


@contextlib.contextmanager
def _lock_wait(ledger: Ledger, wait: float | None) -> Iterator[None]:
    """SQLite: wait at most ``wait`` seconds for the write lock inside the block."""
    if wait is None or not isinstance(ledger, SQLiteLedger):
        yield
        return
    con = ledger.connection
    con.execute(f"PRAGMA busy_timeout = {max(1, int(wait * 1000))}")
    try:
        yield
    finally:
        con.execute(f"PRAGMA busy_timeout = {int(ledger.busy_timeout * 1000)}")


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


class OwnerCheck:
    """Called first in every batch transaction of a pinned Processor.

    Raises:
        Superseded: ``pin`` is not (or no longer) the owner; the batch rolls back.
    """

    def __init__(self, ledger: Ledger, name: str, pin: str | None) -> None:
        self.pin = pin
        self.name = name
        self._sql = f"SELECT owner FROM {_TABLE} WHERE name = {ledger.placeholder}{ledger.row_lock}"

    def __call__(self, tx: LedgerTx) -> None:
        if self.pin is None:
            raise Superseded(f"{self.name}: this instance is a standby")
        row = tx.execute(self._sql, (self.name,)).fetchone()
        if row is None or row[0] != self.pin:
            raise Superseded(
                f"{self.name}: another instance took over (owner {row[0] if row else None!r})"
            )


def require_reset(conn: Connection, what: str) -> None:
    """A takeover resets the consumer: refuse servers without the reset API (before 2.14).

    Raises:
        ConfigError: naming ``what``, the version needed and the server's.
    """
    require_server(conn, RESET_SINCE, f"{what} (a takeover resets the consumer)")


async def reset_to_ack_floor(conn: Connection, stream: str, consumer: str) -> int:
    """Reset the consumer to its ack floor: everything unacknowledged is delivered again now.

    Returns:
        The stream sequence delivery restarts from.
    """
    reply: dict[str, Any] = await conn.api(f"CONSUMER.RESET.{stream}.{consumer}", {})
    return int(reply.get("reset_seq", 0))
