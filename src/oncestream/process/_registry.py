"""Who uses the ledger: the Processor registers its consumer when it starts.

Ledger rows are keyed by stream and sequence, not by consumer, so one ledger is
sound for several consumers of a stream only when no two of them take the same
message, and only for one life of the stream. At start the Processor records its
consumer (:class:`~oncestream.ledger.Registration`: filters, the stream's creation
time, the ack floor) and refuses:

- a stream whose creation time is not the one recorded: it was deleted and created
  again, its sequences number other messages, and the ledger would suppress them;
- another consumer of the stream registered with filters that overlap: each would
  skip every message the other applied (a consumer renamed included).

At each pruning round, :meth:`Registry.limit` reads every other registered consumer's
ack floor from the server (an idle one's, nothing pending or awaiting its ack: the
stream's last sequence): the ledger is pruned no further than the lowest, and
the span deleted joins every registered consumer's prune horizon. A registered
consumer that no longer exists holds pruning at its last recorded floor.

A consumer's filter edited while its Processor runs (``CONSUMER.CREATE`` with action
``update``) is checked again before the Processor applies or suppresses anything
under the new filter (:meth:`Registry.admit`, :meth:`Registry.recheck`).

What a batch is checked against is the consumer's registry row, not this instance's
memory of it: another instance of the same consumer (active/standby, competing, a
``bind`` one next to registered ones) may have registered other filters since, and
a neighbour then been allowed on the subjects this instance still thinks its own.
So the row is read again inside each batch transaction (:meth:`Registry.verify`,
after the prune horizons: a registration either committed before the read or waits
for the transaction to end; PostgreSQL's READ COMMITTED lets the read see it): when
a subject of the batch lies outside it, the batch is rolled back (nothing applied,
suppressed or acked) and checked again against the row, registering again. The
batch's subjects are checked, not this instance's last reading of the row, which a
re-check may replace while the batch waits for the ledger lock. Rows are
disjoint at every instant, so a message inside its consumer's row when its
transaction reads it is no other registered consumer's. The check costs one
primary-key read per batch, no round trip to the server.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from .._connection import Connection
from .._errors import ConfigError, ConsumerNotFound
from .._message import Message
from .._names import subject_matches
from ..ledger import Horizon, LedgerTx, Registration
from ._applying import RegistryMoved
from ._ledgercalls import LedgerCalls
from ._setup import consumer_filters

__all__ = ["Registry", "RegistryMoved", "check_registry"]

log = logging.getLogger(__name__)

_DOCS = "docs/processing.md, 'One ledger, which consumers'"


def ack_floor(info: dict[str, Any]) -> int:
    """The consumer's ack floor (a stream sequence) in a ``CONSUMER.INFO`` reply."""
    return int((info.get("ack_floor") or {}).get("stream_seq", 0))


async def _registration(
    conn: Connection, stream: str, consumer: str, info: dict[str, Any]
) -> Registration:
    created = str((await conn.stream_info(stream)).get("created") or "")
    filters = consumer_filters(info.get("config") or {})
    return Registration(stream, consumer, filters, created, ack_floor(info))


def check_registry(mine: Registration, registered: list[Registration]) -> None:
    """Refuse ``mine`` when the ledger's ``registered`` consumers of its stream forbid it."""
    stream = mine.stream
    for old in registered:
        if old.stream_created and mine.stream_created and old.stream_created != mine.stream_created:
            names = ", ".join(sorted(r.consumer for r in registered))
            raise ConfigError(
                f"stream {stream!r} was created at {mine.stream_created}, but this ledger "
                f"records the messages of a stream {stream!r} created at {old.stream_created} "
                f"(consumers {names}): the stream was deleted and created again, its "
                f"sequences number other messages, and this ledger would skip them as applied. "
                f"Process the new stream with a new ledger (another SQLite file, another "
                f"PostgreSQL database); or, when nothing of the old stream is needed any more, "
                f"delete its rows from this ledger ({_DOCS})"
            )
    for other in registered:
        if other.consumer == mine.consumer or not other.overlaps(mine.filters):
            continue
        raise ConfigError(
            f"consumer {stream}/{mine.consumer} (filters {_shown(mine.filters)}) and consumer "
            f"{stream}/{other.consumer} (filters {_shown(other.filters)}), registered in this "
            f"ledger, take some of the same messages: the ledger records each message of a "
            f"stream once, so each would skip what the other applied. The rule: one ledger per "
            f"consumer of a stream, unless their filter subjects are disjoint. Two consumers "
            f"that both need the messages: give each its own ledger. A consumer renamed "
            f"({other.consumer} -> {mine.consumer}): keep the old name, or stop it, create "
            f"the new one starting after the old one's ack floor (sequence "
            f"{other.ack_floor + 1} or later when last read), delete the old one and its "
            f"registration ({_DOCS}): `DELETE FROM oncestream_consumers WHERE stream = "
            f"'{stream}' AND consumer = '{other.consumer}'`"
        )


def _shown(filters: tuple[str, ...]) -> str:
    return " ".join(filters) if filters else "none: every subject"


def _floor(info: dict[str, Any], last_seq: int) -> int:
    """A neighbour's floor for pruning: its ack floor, or ``last_seq`` when it is idle.

    A consumer whose filter no message matched keeps ack floor 0 and would hold
    pruning at 0 for ever. One with nothing pending and nothing awaiting its ack has
    acked every message its filter matched up to the stream's last sequence when
    its info was read; ``last_seq`` was read before that, so it is no later, and
    every row up to it that the neighbour's filter matches is acked. A later reset
    of the neighbour to an earlier sequence is covered by the prune horizon (the
    span deleted is recorded for every registered consumer).
    """
    floor = ack_floor(info)
    if not info.get("num_pending") and not info.get("num_ack_pending"):
        return max(floor, last_seq)
    return floor


#: Seconds between checks of the consumer's filters against its registry row.
RECHECK_INTERVAL = 5.0
#: Batches rolled back on :class:`RegistryMoved` in a row (no batch applied, no watch
#: round between) before a stop.
_MOVES = 3

#: The most subjects :meth:`Registry.takes` remembers as inside the filters.
_INSIDE_MAX = 10_000


def _depth(filters: tuple[str, ...]) -> int:
    """The deepest token any of ``filters`` inspects (``a.>`` inspects one: ``>`` only
    asks for more tokens, whatever they are)."""
    return max((f.count(".") if f.endswith(">") else f.count(".") + 1 for f in filters), default=0)


class _Inside:
    """Which subjects lie inside ``filters`` (each inside one of them), remembered.

    Subjects are remembered by their first tokens, as deep as any filter looks,
    plus whether more follow: per-entity subjects (``orders.eu.<id>``) under
    ``orders.eu.>`` share one key, so the check per message is a split and a set
    lookup, whatever the number of filters.
    """

    def __init__(self, filters: tuple[str, ...]) -> None:
        self.filters = filters
        self.key = Horizon.key(filters)
        self.seen: set[str] = set()
        self.depth = _depth(filters)

    def takes(self, subjects: list[str]) -> bool:
        filters, seen, depth = self.filters, self.seen, self.depth
        if not filters:  # every subject
            return True
        unseen = set(subjects).difference(seen)  # most batches repeat a few subjects
        if not unseen:
            return True
        new: list[tuple[str, str]] = []
        for subject in unseen:
            parts = subject.split(".", depth)
            # More tokens than any filter inspects: the first ``depth`` ones and ">"
            # (built from the tokens: the last may be empty, as in "a.b.").
            key = subject if len(parts) <= depth else ".".join(parts[:depth]) + ".>"
            if key not in seen:
                new.append((key, subject))
        if not all(any(subject_matches(f, s) for f in filters) for _, s in new):
            return False
        if len(seen) > _INSIDE_MAX:  # bounded: subjects may be unique per message
            seen.clear()
        seen.update(k for k, _ in new)
        seen.update(unseen)
        return True


class Registry:
    """The Processor's consumer in its ledger's registry: checked and recorded at start,
    the other registered consumers' floors at each pruning round.

    Args:
        calls: the ledger's calls (its lock and worker thread).
        stream, consumer: the Processor's.
    """

    def __init__(self, calls: LedgerCalls, stream: str, consumer: str) -> None:
        self.calls, self.ledger = calls, calls.ledger
        self.stream, self.consumer = stream, consumer
        self._missing: set[str] = set()  # logged once each
        #: A ``bind`` Processor: checks against the consumer's row, never registers.
        self.bound = False
        #: The filters of the consumer's registry row as last read (None: no row, or a
        #: ledger without a registry): what :meth:`takes` checks against before a batch.
        #: :meth:`verify` does not use them (they may change while a batch waits).
        self.filters: tuple[str, ...] | None = None
        self._inside = _Inside(())  # self.filters, for takes()
        self._row_inside = _Inside(())  # the row verify() read last (under the ledger lock)
        #: The registry recorded this consumer once (the ledger has a registry): from then
        #: on a batch transaction that finds no row is refused.
        self._recorded = False
        self._unchecked_logged = False
        self._moves = 0  # RegistryMoved since the last watch round or batch applied

    def _adopt(self, filters: tuple[str, ...] | None) -> None:
        self.filters = filters
        self._inside = _Inside(filters or ())

    async def _row(self) -> tuple[str, ...] | None:
        registered: list[Registration] = await self.calls.db(self.ledger.registrations, self.stream)
        for reg in registered:
            if reg.consumer == self.consumer:
                return reg.filters
        return None

    async def check(self, conn: Connection, filter_subject: str | None) -> None:
        """:func:`check_registry` before the consumer is created: a refused Processor leaves
        no consumer behind (:meth:`register` checks again, atomically).

        Raises:
            ConfigError: as :func:`check_registry`.
        """
        try:
            info = await conn.consumer_info(self.stream, self.consumer)
        except ConsumerNotFound:  # to be created with filter_subject (or refused: create off)
            info = {"config": {"filter_subject": filter_subject} if filter_subject else {}}
        mine = await _registration(conn, self.stream, self.consumer, info)
        check_registry(mine, await self.calls.db(self.ledger.registrations, self.stream))

    async def register(self, conn: Connection) -> Registration:
        """Check the ledger's registry for the stream and record the consumer in it.

        Raises:
            ConfigError: the stream was created again since the ledger recorded it, or
                another registered consumer of the stream takes some of the same subjects.
        """
        info = await conn.consumer_info(self.stream, self.consumer)
        mine = await _registration(conn, self.stream, self.consumer, info)
        await self.calls.db(self.ledger.register, mine, functools.partial(check_registry, mine))
        # Read back, not assumed: a ledger without a registry records nothing.
        self._adopt(await self._row())
        self._recorded = self._recorded or self.filters is not None
        return mine

    async def bind(self) -> None:
        """A ``bind`` Processor's start: check against the consumer's row (if registered)."""
        self.bound = True
        self._adopt(await self._row())

    def verify(self, tx: LedgerTx, subjects: list[str]) -> None:
        """In a batch transaction: every one of the batch's ``subjects`` lies inside the
        consumer's registry row as this transaction reads it.

        Checked against the row read here, never against this instance's memory of it
        (which a re-check may change between the batch's admission and its transaction).
        A ``bind`` Processor whose consumer has no row is not checked; a registered one
        is refused without its row (deleted: it registers again). A ledger whose
        transactions do not read the registry (:meth:`LedgerTx.registered` not
        implemented) is not checked here (logged once).

        Raises:
            RegistryMoved: a subject lies outside the row, or the row is gone (the
                transaction is rolled back; :meth:`moved` checks again).
        """
        if type(tx).registered is LedgerTx.registered:
            if not self._unchecked_logged and self.filters is not None:
                self._unchecked_logged = True
                log.warning(
                    "%s/%s: the ledger's transactions (%s) do not read the registry "
                    "(LedgerTx.registered): batches are checked against the consumer's "
                    "registration as read at start and at each re-check only, not inside "
                    "each transaction; another instance's registration in between goes "
                    "unseen (%s)",
                    self.stream,
                    self.consumer,
                    type(tx).__name__,
                    _DOCS,
                )
            return
        row = tx.registered(self.stream, self.consumer)
        if row is None:
            if self.bound or not self._recorded:
                return  # nothing registered to check against (a bind start with no row)
            raise RegistryMoved(None)
        inside = self._row_inside
        if inside.key != Horizon.key(row):
            inside = self._row_inside = _Inside(row)
        if not inside.takes(subjects):
            raise RegistryMoved(row)

    def applied(self) -> None:
        """A batch went through its transaction: the count of rows moved starts again."""
        self._moves = 0

    def takes(self, subjects: list[str]) -> bool:
        """True when every one of ``subjects`` lies inside the filters registered.

        Registered consumers' filters are disjoint, so a message inside this consumer's
        registered filters was never another registered consumer's: the ledger may
        suppress it (:meth:`verify` confirms it against the row in the transaction). A
        message outside them proves the consumer's filter was edited (the server
        delivers only what the filter matches): it must not be applied or suppressed
        before it is registered again. Matching subjects costs no round trip, unlike
        reading ``CONSUMER.INFO`` per batch (see :class:`_Inside`).
        """
        if not self.filters:  # no row, or every subject (nothing can lie outside)
            return True
        return self._inside.takes(subjects)

    async def admit(
        self, conn: Connection | None, subjects: list[str], fail: Callable[[ConfigError], None]
    ) -> bool:
        """True when messages on ``subjects`` may be applied or suppressed by the ledger;
        else False, ``fail`` called with the ``ConfigError`` a start would raise.

        Called before each batch: a subject outside the registered filters (see
        :meth:`takes`) has the consumer read and registered again (a ``bind``
        Processor, which does not register, stops).
        """
        if self.takes(subjects):
            return True
        assert conn is not None
        try:
            if self.bound:
                raise ConfigError(
                    f"consumer {self.stream}/{self.consumer} delivered messages on "
                    f"{self._outside(subjects)}, outside the filters registered for it in "
                    f"the ledger ({_shown(self.filters or ())}): its filter was edited, and "
                    f"this Processor runs with bind, so it does not register the new "
                    f"filters; it stopped without applying or acknowledging them. Start a "
                    f"Processor without bind on the consumer (its start checks the new "
                    f"filters against the registry), then the bound ones ({_DOCS})"
                )
            await self._reregister(conn, None)
            if not self.takes(subjects):
                # Edited and edited back: what was delivered in between may be a
                # neighbour's message, which the ledger would suppress.
                raise ConfigError(
                    f"consumer {self.stream}/{self.consumer} delivered messages on "
                    f"{self._outside(subjects)}, outside its filters "
                    f"{_shown(self.filters or ())}: its filter was edited while its "
                    f"Processor ran; the Processor stopped without applying or "
                    f"acknowledging them ({_DOCS})"
                )
        except ConfigError as exc:
            fail(exc)
            return False
        return True

    def _outside(self, subjects: list[str]) -> str:
        filters = self.filters or ()
        return ", ".join(
            sorted({s for s in subjects if not any(subject_matches(f, s) for f in filters)})
        )

    async def moved(
        self,
        conn: Connection | None,
        moved: RegistryMoved,
        msgs: list[Message],
        fail: Callable[[ConfigError], None],
    ) -> bool:
        """After :class:`RegistryMoved`: True to retry the batch, checked against the row
        found (as :meth:`admit`; a registered Processor whose row is gone registers again).
        Bounded: a row that keeps moving stops the run."""
        self._moves += 1
        if self._moves > _MOVES:
            fail(
                ConfigError(
                    f"consumer {self.stream}/{self.consumer}: its registration in the ledger "
                    f"changed under {_MOVES} attempts in a row (now: {moved}); the Processor "
                    f"stopped without applying or acknowledging the batch. Another Processor "
                    f"of the consumer keeps registering other filters: are its instances "
                    f"configured alike? ({_DOCS})"
                )
            )
            return False
        self._adopt(moved.filters)
        if moved.filters is None and not self.bound:
            assert conn is not None
            try:
                await self._reregister(conn, None)
            except ConfigError as exc:
                fail(exc)
                return False
        return await self.admit(conn, [m.subject for m in msgs], fail)

    async def watch(self, conn: Connection, fail: Callable[[ConfigError], None]) -> None:
        """Compare the consumer's filters with its row every :data:`RECHECK_INTERVAL`
        seconds, pruning or not: a narrowing edit is recorded (else a neighbour on the
        subjects given up is refused), another instance's registration adopted."""
        while True:
            await asyncio.sleep(RECHECK_INTERVAL)
            self._moves = 0
            try:
                info = await conn.consumer_info(self.stream, self.consumer)
                if not await self.recheck(conn, consumer_filters(info.get("config") or {}), fail):
                    return  # the filter edited to overlap a neighbour
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # best effort: each batch is checked in its transaction
                log.debug("registry recheck skipped: %s", exc)

    async def recheck(
        self, conn: Connection, filters: tuple[str, ...], fail: Callable[[ConfigError], None]
    ) -> bool:
        """As :meth:`admit`, for the consumer's ``filters`` read from its info: registered
        again when they are not the row's (an edit seen before any message, a narrowing
        included, or another instance's registration)."""
        try:
            self._adopt(await self._row())
            await self._reregister(conn, filters)
        except ConfigError as exc:
            fail(exc)
            return False
        return True

    async def _reregister(self, conn: Connection, filters: tuple[str, ...] | None) -> None:
        """Register again when the consumer's filters (``filters``, or read from the server)
        are not the ones recorded: recorded when the registry allows them.

        Raises:
            ConfigError: the new filters overlap another registered consumer's (as at start).
        """
        if self.bound or (
            filters is not None and self.filters is not None and set(filters) == set(self.filters)
        ):
            return
        old = self.filters
        try:
            mine = await self.register(conn)
        except ConfigError as exc:
            raise ConfigError(
                f"consumer {self.stream}/{self.consumer} was edited while its Processor ran "
                f"(filters registered: {_shown(old or ())}), and the registry refuses its new "
                f"filters; the Processor stopped without applying or acknowledging the "
                f"batch: {exc}"
            ) from exc
        if old is not None and mine.filters != old:
            log.warning(
                "%s/%s: the consumer's filter subjects were edited while running (%s -> %s); "
                "the ledger's registry allows them and records them",
                self.stream,
                self.consumer,
                _shown(old),
                _shown(mine.filters),
            )

    async def limit(
        self, conn: Connection, own_floor: int, up_to: int
    ) -> tuple[int, list[Registration]]:
        """``up_to`` lowered to the lowest ack floor of the other registered consumers, and
        their registrations; records the floors read (``own_floor`` too)."""
        registered = await self.calls.db(self.ledger.registrations, self.stream)
        others = [r for r in registered if r.consumer != self.consumer]
        floors = {self.consumer: own_floor}
        # Read before the neighbours' CONSUMER.INFO: see _floor.
        last_seq = (
            int(((await conn.stream_info(self.stream)).get("state") or {}).get("last_seq", 0))
            if others
            else 0
        )
        for other in others:
            try:
                floor = _floor(await conn.consumer_info(self.stream, other.consumer), last_seq)
            except ConsumerNotFound:
                floor = other.ack_floor
                if other.consumer not in self._missing:
                    self._missing.add(other.consumer)
                    log.warning(
                        "%s/%s: consumer %s is registered in the ledger but no longer exists "
                        "on the server: the ledger is pruned no further than its last "
                        "recorded ack floor, %d (%s says how to remove a registration)",
                        self.stream,
                        self.consumer,
                        other.consumer,
                        floor,
                        _DOCS,
                    )
            else:
                floors[other.consumer] = floor
            up_to = min(up_to, floor)
        await self.calls.db(self.ledger.record_floors, self.stream, floors)
        return up_to, others

    def prune_call(
        self, filters: tuple[str, ...], others: list[Registration]
    ) -> Callable[[str, int, int], int]:
        """``ledger.prune`` recording the span in the horizon of the consumer and ``others``."""
        prune = functools.partial(self.ledger.prune, consumer=self.consumer, filters=filters)
        if others:  # a Ledger subclass written before the registry takes no neighbours
            prune = functools.partial(prune, neighbours=others)
        return prune
