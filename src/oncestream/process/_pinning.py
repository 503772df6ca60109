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

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .._connection import Connection
from .._errors import ConsumerNotFound, LedgerError, LedgerUnusable, OncestreamError, StreamNotFound
from ..ledger import Ledger, LedgerTx, PostgresLedger, SQLiteLedger
from ..read import MessageStream
from ..streams import require_server
from ..streams._internal import RESET_SINCE
from ._ackfrontier import AckFrontier
from ._bound import BoundConsumer
from ._handedback import HandedBack
from ._ledgercalls import RETRY_DELAY, WAIT_NOTICE, LedgerCalls, is_lock_wait
from ._options import ProcessorStats
from ._pulls import Pulls

__all__ = [
    "Fence",
    "FenceBusy",
    "OwnerCheck",
    "PinnedGroup",
    "Superseded",
    "fence_name",
    "require_reset",
    "reset_to_ack_floor",
    "take_over",
]

log = logging.getLogger(__name__)

_TABLE = "oncestream_owners"
#: Seconds one attempt of a takeover's fence waits for the ledger's lock (at most; a
#: quarter of ``pinned_ttl`` when that is less, so the pin is kept before it expires).
_FENCE_WAIT = 1.0


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


class OwnerCheck:
    """Called first in every batch transaction of a pinned Processor.

    Raises:
        Superseded: ``pin`` is not (or no longer) the owner; the batch rolls back.
    """

    def __init__(self, ledger: Ledger, name: str, pin: str | None) -> None:
        self.pin = pin
        self.name = name
        self._ledger = ledger
        self._sql = f"SELECT owner FROM {_TABLE} WHERE name = {ledger.placeholder}{ledger.row_lock}"

    def __call__(self, tx: LedgerTx) -> None:
        if self.pin is None:
            raise Superseded(f"{self.name}: this instance is a standby")
        try:
            row = tx.execute(self._sql, (self.name,)).fetchone()
        except Exception as exc:
            # The batch's first statement: where a restarted database shows first. As a
            # LedgerError it is retried on a new connection like any claim's failure.
            if self._ledger.is_transient(exc) or self._ledger.is_unusable(exc):
                raise self._ledger.failure(f"{self.name}: check the owner", exc) from exc
            raise
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


class Fence(Protocol):
    """Who may apply: called first in every batch transaction, and told when it refused.

    A pinned group's (:class:`PinnedGroup`) or ack policy ``all``'s
    (:class:`~oncestream.process._ackall.AckAllOwner`).
    """

    def __call__(self, tx: LedgerTx) -> None:
        """Raise :class:`Superseded` when this instance may not apply (rolls the batch back)."""
        ...

    def superseded(self, exc: Superseded) -> None:
        """A batch was rolled back by :meth:`__call__`: what this instance does now."""
        ...


class PinnedGroup:
    """A pinned Processor's side of its priority group: the fence, the takeover, the demotion.

    The server delivers to the pinned client only. When a pull delivers under a pin
    this instance does not apply under (:meth:`follow`), it takes over (fence,
    reset, re-subscribe: the module's docstring) or, when the pin moved on, it
    becomes a standby again. Every batch transaction checks the owner row first
    (the instance is its own :class:`Fence`).

    Args:
        bound: the consumer (its options name the group and ``pinned_ttl``).
        conn: the connection (the takeover's consumer reset).
        calls: the ledger's calls (the fence is written through them).
        pulls: the consumer's pull, replaced by a takeover.
        stats: counters (``takeovers``, ``demotions``, ``takeover_lock_waits``).
        stopping: whether a stop was requested (a takeover's wait ends).
        progress: called when this instance's role changed.
        frontier: ack policy ``all``: what one ack may cover, counted from this
            instance's last takeover (its reset numbers deliveries from 1 again).
        held: the messages this instance handed back (:mod:`._handedback`), forgotten
            at a demotion: the new active instance finishes them.

    Example::

        group = PinnedGroup(bound, conn, calls, pulls, stats, stopping=..., progress=...)
        if await group.follow(pull):
            ...  # the role changed: pull again
    """

    def __init__(
        self,
        bound: BoundConsumer,
        conn: Connection,
        calls: LedgerCalls,
        pulls: Pulls,
        stats: ProcessorStats,
        *,
        stopping: Callable[[], bool],
        progress: Callable[[], None],
        frontier: AckFrontier | None = None,
        held: HandedBack | None = None,
    ) -> None:
        assert bound.options.priority_group is not None
        self.frontier = frontier
        self.held = held
        self.bound = bound
        self.stream, self.consumer = bound.stream, bound.consumer
        self.options = bound.options
        self.conn = conn
        self.calls = calls
        self.pulls = pulls
        self.stats = stats
        self.stopping = stopping
        self.progress = progress
        self.name = fence_name(self.stream, self.consumer, bound.options.priority_group)
        #: The pin this instance applies under (None: standby).
        self.active_pin: str | None = None
        #: ``time.time()`` of the last takeover (0.0: never).
        self.took_over_at = 0.0
        #: ``time.monotonic()`` since when this instance holds the pin but cannot take
        #: over yet (the ledger locked by another process, the reset failing); 0.0: not.
        self.waiting_since = 0.0
        self._check = OwnerCheck(calls.ledger, self.name, None)

    def __call__(self, tx: LedgerTx) -> None:
        """The owner check of the current pin (a standby's refuses every batch)."""
        self._check(tx)

    def superseded(self, exc: Superseded) -> None:
        """Another instance owns the consumer: stop applying, wait as a standby."""
        assert self.pulls.current is not None
        self._demote(self.pulls.current, str(exc))

    async def follow(self, pull: MessageStream) -> bool:
        """True when ``pull`` delivered under a pin this instance does not apply under: it
        took over (a new pin) or became a standby (none any more); pull again."""
        if pull.pin_id == self.active_pin or self.stopping():
            return False
        if pull.pin_id is None:
            self._demote(pull, "the server moved the pin to another instance")
        else:
            await self._take_over(pull, pull.pin_id)
        return True

    async def _take_over(self, pull: MessageStream, pin: str) -> None:
        """Become the active instance under ``pin`` (see the module's docstring).

        A fence or reset that fails (the ledger locked by another process, the
        reset unanswered) is tried again while this instance keeps the pin; the
        takeover is abandoned only when the pin moves on or a stop is requested.
        """
        began = time.monotonic()
        pull.halt()
        await pull.stop()  # messages delivered before the reset never reach the new inbox
        pull.take_unprocessed()
        check = OwnerCheck(self.calls.ledger, self.name, pin)
        fence_wait = min(_FENCE_WAIT, self.options.pinned_ttl / 4)
        fenced = False
        previous: str | None = None
        keeper: MessageStream | None = None
        attempts = 0
        noticed = 0.0
        try:
            while True:
                attempts += 1
                busy = False
                try:
                    if not fenced:
                        previous = await self.calls.db(
                            functools.partial(take_over, wait=fence_wait),
                            self.calls.ledger,
                            check.name,
                            pin,
                        )
                        fenced = True
                    if keeper is not None:
                        await self._drop_keeper(keeper)  # nothing it holds outlives the reset
                        keeper = None
                    restart = await reset_to_ack_floor(self.conn, self.stream, self.consumer)
                    break
                except (LedgerUnusable, ConsumerNotFound, StreamNotFound):
                    raise
                except OncestreamError as exc:
                    busy = isinstance(exc, FenceBusy)
                    if busy:
                        self.stats.takeover_lock_waits += 1
                    if not self.waiting_since:
                        self.waiting_since = began
                    now = time.monotonic()
                    if not noticed or now - noticed >= WAIT_NOTICE:
                        noticed = now
                        log.warning(
                            "%s/%s: holding the pin of priority group %r but cannot take over "
                            "yet (%.0fs, attempt %d): %s; staying a standby and retrying",
                            self.stream,
                            self.consumer,
                            self.options.priority_group,
                            now - began,
                            attempts,
                            exc,
                        )
                if keeper is None:
                    keeper = await self.pulls.renew(pin, keep_pin=True)
                if not await self._hold_pin(keeper, pin, 0.0 if busy else RETRY_DELAY):
                    log.warning(
                        "%s/%s: takeover abandoned after %.1fs (%s); waiting as a standby",
                        self.stream,
                        self.consumer,
                        time.monotonic() - began,
                        "stopping" if self.stopping() else "the pin moved on",
                    )
                    await self._drop_keeper(keeper)
                    keeper = None
                    if not self.stopping():
                        (await self.pulls.renew(None)).forget_pin_later(pin)
                    return
        finally:
            self.waiting_since = 0.0
            if keeper is not None:
                await self._drop_keeper(keeper)
        self._check = check
        if self.frontier is not None:  # deliveries count from 1 after the reset
            self.frontier.restart()
        await self.pulls.renew(pin)
        self.active_pin = pin
        self.took_over_at = time.time()
        self.stats.takeovers += 1
        log.warning(
            "%s/%s: this instance is now the active one of priority group %r (previous "
            "owner %s); consumer reset to sequence %d, takeover took %.0f ms",
            self.stream,
            self.consumer,
            self.options.priority_group,
            "none" if previous is None else "another instance",
            restart,
            (time.monotonic() - began) * 1000,
        )
        self.progress()

    async def _hold_pin(self, keeper: MessageStream, pin: str, delay: float) -> bool:
        """Keep ``pin`` while a takeover waits; False when it moved on or a stop was requested.

        ``keeper`` pulls one message at a time under the pin, which keeps it; what
        it receives is dropped (the takeover's reset delivers it again, in order).
        """
        if delay:
            await asyncio.sleep(delay)
        while not self.stopping():
            try:
                if not await keeper.next_batch(0, timeout=0):
                    break
            except (ConsumerNotFound, StreamNotFound):
                raise
            except OncestreamError as exc:  # missed heartbeats: it pulls again by itself
                log.debug("pin keeper: %s", exc)
        keeper.take_unprocessed()
        return keeper.pin_id == pin and not self.stopping()

    async def _drop_keeper(self, keeper: MessageStream) -> None:
        keeper.halt()
        await keeper.stop()
        keeper.take_unprocessed()

    def _demote(self, pull: MessageStream, why: str) -> None:
        """Stop applying: drop what was delivered under the old pin and wait as a standby."""
        dropped = len(pull.take_unprocessed())
        pull.forget_pin()
        if self.active_pin is not None:
            self.stats.demotions += 1
            log.warning(
                "%s/%s: no longer the active instance (%s); %d buffered messages left to "
                "the new one, waiting as a standby",
                self.stream,
                self.consumer,
                why,
                dropped,
            )
        self.active_pin = None
        self._check = OwnerCheck(self.calls.ledger, self.name, None)
        if self.frontier is not None:  # what it held is the new active instance's now
            self.frontier.restart()
        if self.held is not None:
            self.held.clear()
        self.progress()
