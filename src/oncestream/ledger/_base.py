"""The ledger contract shared by the SQLite and PostgreSQL ledgers.

A ledger records which messages have been applied, in the same database
transaction as the handler's effects. The :class:`~oncestream.Processor`
drives it like this for every batch::

    tx = ledger.begin()                    # one DB transaction
    fresh = tx.claim(entries)              # record keys; returns the ones not seen before
    for each fresh message: handler(msg, tx)   # effects through tx.connection / tx.execute
    tx.commit()                            # effects + ledger rows, atomically
    ... then ack

``claim`` both checks and records, so two processors racing on the same
message (PostgreSQL, after an ack-wait expiry) serialise on the ledger's
primary key: the second one blocks until the first commits and then sees
the key as taken. Ledger calls are synchronous (sqlite3 / psycopg); the
Processor runs them on a worker thread when the database can block.

Pruning forgets rows, never what they meant: ``prune(..., consumer=...)``
records, in the same transaction, the span of sequences it deleted for that
consumer (its :class:`Horizon`, with the consumer's filter). The Processor reads
the horizons first in every batch transaction (``tx.horizons``) and treats a
message inside one as done: a consumer moved back past the pruned rows (a reset,
a consumer deleted and created again) does not apply them again.

Rows are keyed by stream and sequence, not by consumer, so the ledger keeps a
registry of who uses it (:data:`REGISTRY`, a :class:`Registration` per stream and
consumer, written by :meth:`Ledger.register` when a Processor starts): the stream's
creation time (a stream deleted and created again numbers other messages from 1),
each consumer's filter subjects (two consumers whose filters overlap would each
skip what the other applied), and its last known ack floor (a prune never deletes
a row above any registered consumer's floor, and records the span it deleted in
every registered consumer's horizon).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from .._errors import LedgerError, LedgerUnusable
from .._names import subject_matches, subjects_overlap
from ._worker import LedgerWorker

__all__ = [
    "HANDED_BACK",
    "HORIZONS",
    "REGISTRY",
    "Horizon",
    "KeyMode",
    "Ledger",
    "LedgerEntry",
    "LedgerTx",
    "Registration",
]

KeyMode = Literal["sequence", "msg_id"]
T = TypeVar("T")

#: The prune horizons: per (stream, consumer, filters), the span of sequences pruned.
HORIZONS = "oncestream_pruned"


class Horizon(NamedTuple):
    """What pruning forgot of one consumer: the span of sequences whose rows it deleted.

    Rows are pruned only at or below the consumer's ack floor, so every message of
    the span that the consumer takes (its subject matches ``filters``) had been
    finished by then: applied, or dead-lettered, or passed over by the consumer
    (a reset forward, an ack by another client). A redelivery inside the span is
    acked as done, not applied again.

    Attributes:
        first_seq, last_seq: the lowest and the highest sequence pruned.
        filters: the consumer's filter subjects when it was pruned (empty: every subject).
    """

    first_seq: int
    last_seq: int
    filters: tuple[str, ...] = ()

    def covers(self, seq: int, subject: str) -> bool:
        """True when the message at ``seq`` on ``subject`` lies inside this horizon."""
        if not self.first_seq <= seq <= self.last_seq:
            return False
        return not self.filters or any(subject_matches(f, subject) for f in self.filters)

    @staticmethod
    def key(filters: Sequence[str]) -> str:
        """``filters`` as stored (sorted, space separated: subjects hold no spaces)."""
        return " ".join(sorted(set(filters)))


#: Messages a Processor handed back (nak'ed after a failed attempt) and had not finished
#: when it last recorded them, per (stream, consumer, seq), with the attempts so far: the
#: instance that runs the consumer next reads them (docs/processing.md, "handed back").
HANDED_BACK = "oncestream_handed_back"

#: Who uses the ledger: per (stream, consumer), its filters, the stream's creation time
#: and the consumer's last known ack floor.
REGISTRY = "oncestream_consumers"


class Registration(NamedTuple):
    """A consumer whose Processor used the ledger (a row of :data:`REGISTRY`).

    Attributes:
        stream, consumer: the consumer.
        filters: its filter subjects when it last started (empty: every subject).
        stream_created: the stream's creation time as the server reports it
            (``STREAM.INFO`` ``created``; empty when unknown).
        ack_floor: the consumer's ack floor (a stream sequence) when last read.
    """

    stream: str
    consumer: str
    filters: tuple[str, ...]
    stream_created: str
    ack_floor: int = 0

    def overlaps(self, filters: Sequence[str]) -> bool:
        """True when some subject is taken both by this consumer and by one with ``filters``."""
        if not self.filters or not filters:
            return True
        return any(subjects_overlap(a, b) for a in self.filters for b in filters)


class LedgerEntry(NamedTuple):
    """One message as the ledger sees it."""

    stream: str
    seq: int
    msg_id: str | None = None


class LedgerTx(abc.ABC):
    """An open ledger transaction; the handler writes its effects through it.

    Attributes:
        connection: the raw DB-API connection (``sqlite3.Connection`` or
            ``psycopg.Connection``) inside the transaction.
    """

    connection: Any

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        """Run one statement in the transaction; returns the cursor."""
        return self.connection.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        """Run one statement for many parameter rows in the transaction."""
        cursor = self.connection.cursor()
        cursor.executemany(sql, rows)
        return cursor

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        """A block whose statements need not wait for each other's results.

        The Processor calls a per-message handler for every message of a batch in
        it. PostgreSQL sends them in pipeline mode (psycopg's ``conn.pipeline()``):
        one network round trip for the block instead of one per statement; a
        statement's error is raised by a later statement or when the block ends
        (reading a result, ``fetchone()``, waits for it). Writes without rows are
        queued in libpq's buffer and sent with a Sync behind them
        (:mod:`oncestream.ledger._pg_pipeline`). Elsewhere it does nothing.
        """
        yield

    def reported_late(self, exc: BaseException) -> bool:
        """True when ``exc``, raised inside :meth:`pipeline`, may be an earlier
        statement's error (PostgreSQL's pipeline mode reports it when a later result is
        read); False when it belongs to the statement or code that raised it."""
        return False

    @abc.abstractmethod
    def claim(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        """Record ``entries``; return, per entry, True if it was not recorded before.

        Entries must be sorted by ``(stream, seq)`` and unique.
        """

    def horizons(self, stream: str, consumer: str) -> list[Horizon]:
        """The prune horizons of ``consumer`` on ``stream``, read inside the transaction.

        Called before :meth:`claim`: a prune that raises a horizon and deletes its rows
        either commits before this read (which then sees it) or waits for this
        transaction to end (SQLite's write lock; a PostgreSQL advisory lock).
        Ledgers without horizons return none.
        """
        return []

    def registered(self, stream: str, consumer: str) -> tuple[str, ...] | None:
        """The filters of ``consumer``'s row in the registry, read inside the transaction
        (None: no row, or a ledger without a registry).

        Called after :meth:`horizons`: a registration of the stream either committed
        before this read or waits for this transaction to end (the same locks).
        """
        return None

    @abc.abstractmethod
    def commit(self) -> None:
        """Commit the effects and the ledger rows atomically."""

    @abc.abstractmethod
    def rollback(self) -> None:
        """Abandon the transaction."""


class Ledger(abc.ABC):
    """Where applied messages are recorded (see the module docstring for the contract).

    Args (of the implementations):
        key: ``"sequence"`` (default) keys by ``(stream, stream sequence)``;
            ``"msg_id"`` additionally keys by ``(stream, Nats-Msg-Id)`` to catch
            duplicates published outside the stream's duplicate window.
    """

    key: KeyMode = "sequence"
    #: Create the ledger's own tables on :meth:`open` (False: just a transactional
    #: connection to the database, as ``foreachBatch`` uses it).
    tables: bool = True
    #: True when calls never block for long (SQLite): the Processor may run
    #: them on the event loop thread.
    inline: bool = False

    def is_transient(self, exc: BaseException) -> bool:
        """True when ``exc`` (raised inside a handler) is the database failing, not the handler.

        Such errors are retried as ledger errors instead of counting as handler
        failures (which would eventually dead-letter good messages during an outage).
        """
        return False

    def is_unusable(self, exc: BaseException) -> bool:
        """True when ``exc`` means the database cannot be used until someone fixes it.

        A corrupt or read-only database (raised inside a handler too): the Processor
        stops with :class:`~oncestream.LedgerUnusable` instead of retrying forever.
        """
        return False

    def failure(self, what: str, exc: BaseException) -> LedgerError:
        """The error for ``exc`` raised by the database during ``what``: a
        :class:`~oncestream.LedgerUnusable` when :meth:`is_unusable`, else a ``LedgerError``."""
        kind = LedgerUnusable if self.is_unusable(exc) else LedgerError
        return kind(f"{self!r}: {what}: {exc}")

    @abc.abstractmethod
    def open(self) -> None:
        """Connect and create the ledger tables if absent (idempotent)."""

    #: The open DB-API connection, or None before :meth:`open` / after :meth:`close`.
    _con: Any = None
    #: The thread :meth:`call` runs calls on (started by the first one, ended by close()).
    _worker: LedgerWorker | None = None

    def close(self) -> None:
        """Close the connection (idempotent), once every :meth:`call` handed to the
        ledger's thread before it has returned.

        Called on that thread (``await ledger.call(ledger.close)``, which queues it
        behind the calls in flight), it closes at once; from any other thread it first
        waits for the thread's queued calls, so it must not be called on an event loop
        whose coroutines such a call waits for.
        """
        worker = self._worker
        if worker is not None:
            self._worker = None
            worker.stop(wait=not worker.on_worker_thread())
        if self._con is not None:
            self._con.close()
            self._con = None

    def interrupt(self) -> None:
        """Ask the database to stop the statement running now on the ledger's connection.

        Called from another thread while a :meth:`call` runs (its caller was
        cancelled); the call then fails, or ends normally if it was not inside a
        statement. Ledgers that cannot interrupt do nothing.
        """
        return None

    async def call(
        self,
        func: Callable[..., T],
        *args: Any,
        undo: Callable[[T], object] | None = None,
    ) -> T:
        """``func(*args)`` on the ledger's own thread, one call at a time, in order.

        For calls that may block (a lock wait, a PostgreSQL round trip): the event loop
        runs on meanwhile. Cancelling the awaiting task never leaves the call running
        behind its back: the call is interrupted (:meth:`interrupt`) and waited for
        before the cancellation goes on, so nothing closes the connection under it;
        ``undo(result)`` then runs on the same thread if it had succeeded (e.g. the
        rollback of a transaction begun). A call not started yet is simply dropped.

        Example::

            deleted = await ledger.call(ledger.prune, "ORDERS", 1000)
        """
        worker = self._worker
        if worker is None:
            worker = self._worker = LedgerWorker()
        token = object()
        running = worker.submit(token, func, *args)
        result = asyncio.wrap_future(running)
        try:
            return await asyncio.shield(result)
        except asyncio.CancelledError:
            if running.cancel():  # still queued: it never runs
                raise
            worker.interrupt(token, self.interrupt)
            await _finished(result)
            if undo is not None and not result.cancelled() and result.exception() is None:
                await _finished(asyncio.wrap_future(worker.submit(object(), undo, result.result())))
            raise

    @abc.abstractmethod
    def begin(self) -> LedgerTx:
        """Start a transaction."""

    def begin_nowait(self) -> LedgerTx | None:
        """Start a transaction if that needs no wait for a lock; None if it would wait.

        The Processor tries this on the event loop thread and only hands a
        waiting :meth:`begin` to a worker thread. The default never tries.
        """
        return None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[LedgerTx]:
        """One transaction as a context: committed when the block ends, rolled back on an error.

        The helper everything that writes "rows plus a marker, atomically"
        uses: the Processor's batches and ``foreachBatch``'s micro-batches.

        Example::

            with ledger, ledger.transaction() as tx:
                tx.execute("INSERT INTO t (x) VALUES (?)", (1,))
        """
        tx = self.begin()
        try:
            yield tx
        except BaseException:
            tx.rollback()
            raise
        tx.commit()

    #: The driver's parameter placeholder (``?`` for sqlite3, ``%s`` for psycopg).
    placeholder: str = "?"
    #: Appended to a read that must hold its row until the transaction ends
    #: (PostgreSQL's ``FOR SHARE``; SQLite's write transactions already exclude others).
    row_lock: str = ""

    @abc.abstractmethod
    def _fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        """Run one read-only query outside any transaction; its first row or None."""

    def is_applied(self, entry: LedgerEntry) -> bool:
        """True when ``entry`` is recorded (outside any transaction)."""
        p = self.placeholder
        row = self._fetchone(
            f"SELECT 1 FROM oncestream_applied WHERE stream = {p} AND seq = {p}",
            (entry.stream, entry.seq),
        )
        if row is None and self.key == "msg_id" and entry.msg_id:
            row = self._fetchone(
                f"SELECT 1 FROM oncestream_msg_ids WHERE stream = {p} AND msg_id = {p}",
                (entry.stream, entry.msg_id),
            )
        return row is not None

    def applied_count(self, stream: str | None = None) -> int:
        """Rows currently recorded (pruned rows are not counted)."""
        if stream is None:
            row = self._fetchone("SELECT count(*) FROM oncestream_applied", ())
        else:
            row = self._fetchone(
                f"SELECT count(*) FROM oncestream_applied WHERE stream = {self.placeholder}",
                (stream,),
            )
        return int(row[0])

    @abc.abstractmethod
    def prune(
        self,
        stream: str,
        up_to_seq: int,
        limit: int = 10_000,
        *,
        consumer: str | None = None,
        filters: Sequence[str] = (),
        neighbours: Sequence[Registration] = (),
    ) -> int:
        """Delete at most ``limit`` sequence rows with ``seq <= up_to_seq``; return how many.

        ``up_to_seq`` must be at or below the ack floor of ``consumer`` and of every
        consumer registered for ``stream``. With ``consumer``, the span deleted is added
        to its :class:`Horizon` (with its ``filters``) in the same transaction, and to
        that of each of ``neighbours`` (the other registered consumers, with theirs),
        so a redelivery of a pruned message is still not applied again; without it, a
        pruned message delivered again is applied again.
        """

    def horizons(self, stream: str, consumer: str) -> list[Horizon]:
        """The prune horizons of ``consumer`` on ``stream`` (outside any transaction)."""
        return []

    def register(self, mine: Registration, check: Callable[[list[Registration]], None]) -> None:
        """Record ``mine`` in the registry, after ``check`` accepted the stream's registrations.

        ``check`` is called with the registrations of ``mine.stream`` other than
        ``mine.consumer``'s, inside the transaction that writes ``mine`` (two
        Processors starting together are checked one after the other); when it
        raises, nothing is written. Ledgers without a registry only call ``check``
        with none.
        """
        check([])

    def registrations(self, stream: str) -> list[Registration]:
        """The consumers registered for ``stream`` (outside any transaction)."""
        return []

    def record_floors(self, stream: str, floors: dict[str, int]) -> None:
        """Record the ack floors read from the server for registered consumers of ``stream``."""
        return None  # ledgers without a registry keep none

    def handed_back(self, stream: str, consumer: str, life: str) -> dict[int, int]:
        """The messages recorded as handed back by ``consumer`` of ``stream`` and not
        finished: ``{seq: attempts}`` (outside any transaction), of the consumer's
        ``life`` only (its creation time: a consumer deleted and created again under its
        name starts with none). Ledgers without the table keep none."""
        return {}

    def record_handed_back(
        self,
        stream: str,
        consumer: str,
        life: str,
        noted: dict[int, int],
        finished: Sequence[int],
    ) -> None:
        """In one transaction of its own: record ``noted`` (``{seq: attempts}``) as handed
        back by ``consumer`` of ``stream`` in its ``life``, forget ``finished``, and the
        rows of the consumer's other lives."""
        return None  # ledgers without the table keep none

    def __enter__(self) -> Ledger:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _finished(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, whatever cancels the waiting task meanwhile."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({future})
    if not future.cancelled():
        future.exception()  # retrieved: the caller was cancelled, nobody else reads it


def check_key(key: str) -> KeyMode:
    """Validate a ledger key mode."""
    from .._errors import ConfigError

    if key not in ("sequence", "msg_id"):
        raise ConfigError(f"ledger key must be 'sequence' or 'msg_id', got {key!r}")
    return key  # type: ignore[return-value]
