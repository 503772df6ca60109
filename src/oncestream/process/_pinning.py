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
"""

from __future__ import annotations

import logging
from typing import Any

from .._connection import Connection
from .._errors import OncestreamError
from ..ledger import Ledger, LedgerTx
from ..streams import RESET_SINCE, require_server

__all__ = [
    "OwnerCheck",
    "Superseded",
    "fence_name",
    "require_reset",
    "reset_to_ack_floor",
    "take_over",
]

log = logging.getLogger("oncestream.processor")

_TABLE = "oncestream_owners"


class Superseded(OncestreamError):
    """Another instance took over the consumer: this batch was rolled back, not applied."""


def fence_name(stream: str, consumer: str, group: str) -> str:
    """The ledger row naming who may apply for ``stream``/``consumer`` in ``group``."""
    return f"{stream}/{consumer}/{group}"


def take_over(ledger: Ledger, name: str, pin: str) -> str | None:
    """Record ``pin`` as the owner of ``name``; return the previous owner.

    Waits for a batch of the previous owner that already passed its check.
    """
    p = ledger.placeholder
    with ledger.transaction() as tx:
        tx.execute(
            f"CREATE TABLE IF NOT EXISTS {_TABLE} (name TEXT PRIMARY KEY, owner TEXT NOT NULL)"
        )
        row = tx.execute(f"SELECT owner FROM {_TABLE} WHERE name = {p}", (name,)).fetchone()
        tx.execute(
            f"INSERT INTO {_TABLE} (name, owner) VALUES ({p}, {p}) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner",
            (name, pin),
        )
    return None if row is None else str(row[0])


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
