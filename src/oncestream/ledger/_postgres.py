"""The PostgreSQL ledger (psycopg 3), safe for several processors sharing one consumer."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar

from .._dsn import postgres_url
from .._errors import ConfigError, LedgerError
from .._private import redact_url, scrub, split_url, url_secrets
from ._base import (
    HANDED_BACK,
    HORIZONS,
    REGISTRY,
    Horizon,
    KeyMode,
    Ledger,
    LedgerEntry,
    LedgerTx,
    Registration,
    check_key,
)
from ._pg_pipeline import PipelinedWrites, supported, sync_not_flush

__all__ = ["PostgresLedger"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS oncestream_applied ("
    " stream TEXT NOT NULL, seq BIGINT NOT NULL,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (stream, seq))",
    "CREATE TABLE IF NOT EXISTS oncestream_msg_ids ("
    " stream TEXT NOT NULL, msg_id TEXT NOT NULL, seq BIGINT NOT NULL,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (stream, msg_id))",
    "CREATE INDEX IF NOT EXISTS oncestream_msg_ids_age ON oncestream_msg_ids (applied_at)",
    f"CREATE TABLE IF NOT EXISTS {HORIZONS} ("
    " stream TEXT NOT NULL, consumer TEXT NOT NULL, filters TEXT NOT NULL,"
    " first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,"
    " pruned_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (stream, consumer, filters))",
    f"CREATE TABLE IF NOT EXISTS {REGISTRY} ("
    " stream TEXT NOT NULL, consumer TEXT NOT NULL, filters TEXT NOT NULL,"
    " stream_created TEXT NOT NULL, ack_floor BIGINT NOT NULL,"
    " registered_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (stream, consumer))",
    f"CREATE TABLE IF NOT EXISTS {HANDED_BACK} ("
    " stream TEXT NOT NULL, consumer TEXT NOT NULL, seq BIGINT NOT NULL,"
    " life TEXT NOT NULL, attempts BIGINT NOT NULL, PRIMARY KEY (stream, consumer, seq))",
)
_REGISTRATIONS = (
    f"SELECT stream, consumer, filters, stream_created, ack_floor FROM {REGISTRY}"
    " WHERE stream = %s ORDER BY consumer"
)
_HORIZONS = (
    f"SELECT first_seq, last_seq, filters FROM {HORIZONS} WHERE stream = %s AND consumer = %s"
)
#: SQLSTATEs outside psycopg's OperationalError that a retry on a new connection fixes.
_TRANSIENT_STATES = frozenset({"25P03", "26000"})
_CLAIM_NEW = (
    "INSERT INTO oncestream_applied (stream, seq) SELECT %s, s FROM unnest(%s::bigint[]) AS u(s)"
)
_CLAIM_SOME = _CLAIM_NEW + " ON CONFLICT DO NOTHING RETURNING seq"
#: Claims of a stream (shared) exclude its pruning (exclusive): a horizon read after the
#: lock is granted sees every prune committed before, and a later prune waits for the
#: claim's transaction to end. Two int4 keys: apart from the bigint key of the DDL lock.
_HORIZON_LOCK = 74022


def _stream_key(stream: str) -> int:
    """The stream's advisory lock key (a signed 32-bit CRC of its name)."""
    return zlib.crc32(stream.encode()) - 2**31


def _read_horizons(con: Any, stream: str, consumer: str) -> list[Horizon]:
    rows = con.execute(_HORIZONS, (stream, consumer)).fetchall()
    return [Horizon(int(first), int(last), tuple(filters.split())) for first, last, filters in rows]


def _registrations(con: Any, stream: str) -> list[Registration]:
    return [
        Registration(st, c, tuple(f.split()), created, int(floor))
        for st, c, f, created, floor in con.execute(_REGISTRATIONS, (stream,)).fetchall()
    ]


def _abandon(con: Any) -> None:
    """Roll back what ``con`` has begun, raising nothing.

    On a lost connection the rollback fails too ("the connection is lost"): raised
    from an ``except`` or ``finally`` it would replace the error that matters (and
    escape untranslated). A connection whose rollback failed is closed, so that the
    next call opens a new one instead of finding it in a broken transaction.
    """
    try:
        con.rollback()
    except Exception:
        with contextlib.suppress(Exception):
            con.close()


#: Seconds a cancel request may take before it is given up (the statement then ends by
#: itself, or with its connection).
CANCEL_TIMEOUT = 10.0


def _send_cancel(request: Any) -> None:
    """Send a cancel request (a failure leaves the statement to end by itself).

    ``request`` is libpq 17's cancel connection (``PGcancelConn``, which the binary wheel
    ships): it waits in ``select`` and lets the other threads run. The older ``PGcancel``
    (``PQcancel``) holds the GIL while it waits for the postmaster, so a paused or cut-off
    PostgreSQL freezes every thread of the process, the event loop's too, until it answers:
    used only where libpq is older.
    """
    with contextlib.suppress(Exception):
        if not hasattr(request, "start"):
            request.cancel()
            return
        from psycopg import generators, waiting

        request.start()
        try:
            waiting.wait_conn(generators.cancel(request), interval=0.1, timeout=CANCEL_TIMEOUT)
        finally:
            request.finish()


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "the PostgreSQL ledger needs psycopg 3: pip install 'oncestream[postgres]'"
        ) from exc
    return psycopg


class _PostgresTx(LedgerTx):
    def __init__(self, ledger: PostgresLedger, connection: Any) -> None:
        self.ledger = ledger
        self.connection = connection
        self.open = True
        #: Inside a pipeline block: the writes sent at libpq's cost (None: psycopg's way).
        self._writes: PipelinedWrites | None = None

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        writes = self._writes
        if writes is None:
            return self.connection.execute(sql, params)
        result = writes.execute(sql, params)
        if result is not None:
            return result
        # Anything else (a read, RETURNING) gets its results at once, with a Sync (a round
        # trip): psycopg would fetch them later behind a Flush, which disarms the server's
        # idle_in_transaction_session_timeout until the next Sync.
        cursor = self.connection.execute(sql, params)
        writes.wait_results()
        return cursor

    def reported_late(self, exc: BaseException) -> bool:
        return self.ledger.pipeline and isinstance(exc, _psycopg().Error)

    def claim(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        if not entries:
            return []
        psycopg = _psycopg()
        try:
            if entries[0].stream == entries[-1].stream:  # sorted by stream: one stream
                fresh = self._claim_seqs(entries[0].stream, [e.seq for e in entries])
            else:
                fresh = []
                for stream in sorted({e.stream for e in entries}):
                    fresh += self._claim_seqs(
                        stream, [e.seq for e in entries if e.stream == stream]
                    )
            if self.ledger.key == "msg_id":
                fresh = self._claim_ids(entries, fresh)
        except psycopg.Error as exc:
            raise self.ledger.error("claim", exc) from exc
        return fresh

    def _claim_seqs(self, stream: str, seqs: list[int]) -> list[bool]:
        """Record ``seqs`` of ``stream``; per sequence, whether it was not recorded before.

        Conflicting inserts wait for the other transaction: if it commits the key is
        taken, if it rolls back we get it. A batch of new messages (the usual case) is
        one plain INSERT, at half the server's cost of ``ON CONFLICT DO NOTHING
        RETURNING`` (2 vs 4.5 us a row); when one of its keys is taken (a redelivery)
        it is rolled back to a savepoint and claimed row by row that way.
        """
        psycopg = _psycopg()
        con = self.connection
        # Not in a psycopg pipeline block: its end sends a Flush behind the Sync, and a
        # Flush read after the Sync disarms idle_in_transaction_session_timeout until the
        # next Sync (a batch frozen in its handlers would never be ended).
        con.execute("SAVEPOINT oncestream_claim")
        # The array as its text literal: psycopg's list dumper (in Python) costs about
        # 1 us of client CPU a sequence, str() and join() a tenth of it.
        array = "{" + ",".join(map(str, seqs)) + "}"
        try:
            con.execute(_CLAIM_NEW, (stream, array))
            return [True] * len(seqs)
        except psycopg.errors.UniqueViolation:
            con.execute("ROLLBACK TO SAVEPOINT oncestream_claim")
        rows = con.execute(_CLAIM_SOME, (stream, array)).fetchall()
        claimed = {row[0] for row in rows}
        return [seq in claimed for seq in seqs]

    def _claim_ids(self, entries: Sequence[LedgerEntry], fresh: list[bool]) -> list[bool]:
        claimed: set[tuple[str, int]] = set()
        for stream in sorted({e.stream for e in entries}):
            pairs = [(e.msg_id, e.seq) for e in entries if e.stream == stream and e.msg_id]
            if not pairs:
                continue
            rows = self.connection.execute(
                "INSERT INTO oncestream_msg_ids (stream, msg_id, seq)"
                " SELECT %s, i, s FROM unnest(%s::text[], %s::bigint[]) AS u(i, s)"
                " ON CONFLICT DO NOTHING RETURNING seq",
                (stream, [p[0] for p in pairs], [p[1] for p in pairs]),
            ).fetchall()
            claimed.update((stream, row[0]) for row in rows)
        return [
            new and (not e.msg_id or (e.stream, e.seq) in claimed)
            for e, new in zip(entries, fresh, strict=True)
        ]

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        if not self.ledger.pipeline:
            yield
            return
        con = self.connection
        from psycopg import pq

        # The fast path joins the transaction the claim began (never one of its own).
        in_transaction = con.pgconn.transaction_status == pq.TransactionStatus.INTRANS
        writes: PipelinedWrites | None = None
        undo: Callable[[], None] | None = None
        try:
            with con.pipeline() as pipe:
                if in_transaction and supported(pipe):
                    # Until psycopg's end of the block has read its results: it would
                    # wait behind a Flush (see sync_not_flush).
                    undo = sync_not_flush(pipe)
                    writes = self._writes = PipelinedWrites(
                        con, pipe, self.ledger.prepared(con), merge=self.ledger.merge_inserts
                    )
                try:
                    yield
                finally:
                    self._writes = None
                    if writes is not None:
                        writes.close()
        except BaseException as exc:
            if writes is not None:
                writes.failed(exc)
            raise
        finally:
            if undo is not None:
                undo()

    def horizons(self, stream: str, consumer: str) -> list[Horizon]:
        psycopg = _psycopg()
        con = self.connection
        try:
            con.execute(
                "SELECT pg_advisory_xact_lock_shared(%s, %s)", (_HORIZON_LOCK, _stream_key(stream))
            )
            return _read_horizons(con, stream, consumer)
        except psycopg.Error as exc:  # the first step of a claim, and reported as one
            raise self.ledger.error("claim", exc) from exc

    def registered(self, stream: str, consumer: str) -> tuple[str, ...] | None:
        psycopg = _psycopg()
        try:  # under the stream's shared lock, taken by horizons()
            row = self.connection.execute(
                f"SELECT filters FROM {REGISTRY} WHERE stream = %s AND consumer = %s",
                (stream, consumer),
            ).fetchone()
        except psycopg.Error as exc:
            raise self.ledger.error("claim", exc) from exc
        return None if row is None else tuple(row[0].split())

    def commit(self) -> None:
        if self.open:
            self.open = False
            psycopg = _psycopg()
            try:
                self.connection.commit()
            except psycopg.Error as exc:
                self._quiet_rollback()
                raise self.ledger.error("commit", exc) from exc

    def rollback(self) -> None:
        if self.open:
            self.open = False
            self._quiet_rollback()

    def _quiet_rollback(self) -> None:
        _abandon(self.connection)  # closed when it fails: the next begin() reconnects


class PostgresLedger(Ledger):
    """A ledger in PostgreSQL; several processors may share it and one consumer.

    Args:
        url: a ``postgresql://user@host/db`` URL (user and password percent-encoded,
            or written as is: see :func:`oncestream._dsn.postgres_url`), or a libpq
            ``key=value`` connection string.
        key: ``"sequence"`` or ``"msg_id"`` (see :class:`Ledger`).
        msg_id_retention: seconds msg-id rows are kept (``key="msg_id"`` only).
        tables: create the ledger tables on open (False: only transactions).
        pipeline: send a batch's per-message handler statements in pipeline mode
            (:meth:`LedgerTx.pipeline`: no round trip per message). False waits for
            each statement, as a handler that uses ``COPY`` per message needs
            (psycopg refuses COPY in pipeline mode; a ``batch_handler`` is never
            called in one).
        merge_inserts: in pipeline mode, send a run of one-row ``INSERT INTO t (...)
            VALUES (%s, ...)`` of one statement (one per message, typically) as
            multi-row INSERTs of up to 256 rows: about half the server's work a row.
            ``"auto"`` (the default): only into plain tables without triggers (a
            foreign key's included), rules or row-level security, as the database
            says after the first insert into each table in each batch (one round
            trip a table and batch); what the handler sees is then the same.
            True: into any table; row triggers still fire for every row, but
            ``AFTER`` ones at the end of their merged INSERT, and statement triggers
            once per merged INSERT. False: one INSERT a call.

    Example::

        ledger = PostgresLedger("postgresql://app@db/orders")
    """

    inline = False
    placeholder = "%s"
    row_lock = " FOR SHARE"

    def __init__(
        self,
        url: str,
        *,
        key: KeyMode = "sequence",
        msg_id_retention: float = 7 * 86400.0,
        tables: bool = True,
        pipeline: bool = True,
        merge_inserts: bool | Literal["auto"] = "auto",
    ) -> None:
        self.url = postgres_url(url) if split_url(url) is not None else url
        self.tables = tables
        if not isinstance(pipeline, bool):
            raise ConfigError(f"pipeline must be True or False, got {pipeline!r}")
        self.pipeline = pipeline
        if not isinstance(merge_inserts, bool) and merge_inserts != "auto":
            raise ConfigError(f"merge_inserts must be True, False or 'auto', got {merge_inserts!r}")
        self.merge_inserts = merge_inserts
        self.key = check_key(key)
        self.msg_id_retention = msg_id_retention
        self._con: Any = None
        self._prepared_on: Any = None
        self._prepared: dict[tuple[Any, ...], bytes] = {}

    def __repr__(self) -> str:
        return f"PostgresLedger({redact_url(self.url)!r}, key={self.key!r})"

    def prepared(self, con: Any) -> dict[tuple[Any, ...], bytes]:
        """The statements the pipelined writes prepared on ``con`` (a new connection
        starts with none)."""
        if self._prepared_on is not con:
            self._prepared_on = con
            self._prepared = {}
        return self._prepared

    def error(self, what: str, exc: BaseException) -> LedgerError:
        """A LedgerError for ``what`` failing with the driver's ``exc``, its text scrubbed."""
        text = scrub(" ".join(str(exc).split()), url_secrets(self.url))
        return LedgerError(f"PostgreSQL ledger {redact_url(self.url)}: {what}: {text}")

    @property
    def connection(self) -> Any:
        """The open psycopg connection (opened on first use)."""
        if self._con is None:
            self.open()
        return self._con

    def interrupt(self) -> None:
        con = self._con
        if con is None or con.closed:
            return
        try:
            # A copy of what it needs, made here: no I/O, and nothing the cancel thread
            # shares with the connection (which may be closed while it runs).
            pgconn = con.pgconn
            safe = _psycopg().capabilities.has_cancel_safe()
            request = pgconn.cancel_conn() if safe else pgconn.get_cancel()
        except Exception:  # the connection is already broken: nothing runs on it
            return
        # Sending it connects to the server: off the caller's thread (an event loop's).
        threading.Thread(
            target=_send_cancel, args=(request,), name="oncestream-ledger-cancel", daemon=True
        ).start()

    def is_transient(self, exc: BaseException) -> bool:
        psycopg = _psycopg()
        # Connection loss, deadlocks, serialization failures, admin shutdown; the session
        # ended by idle_in_transaction_session_timeout (25P03: a frozen batch, retried on
        # a new connection); the pipelined writes' prepared statements dropped by someone
        # else (26000: DISCARD ALL, DEALLOCATE ALL): retried with them prepared anew.
        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) or (
            getattr(exc, "sqlstate", None) in _TRANSIENT_STATES
        )

    def open(self) -> None:
        if self._con is not None:
            return
        psycopg = _psycopg()
        try:
            # psycopg's own prepared statements off: a rollback with any of them in its
            # cache sends DEALLOCATE ALL, which would drop the pipelined writes' too.
            con = psycopg.connect(self.url, autocommit=False, prepare_threshold=None)
        except psycopg.Error as exc:
            raise self.error("cannot open", exc) from exc
        try:
            if self.tables:
                # Several processors may start together: serialise the DDL.
                con.execute("SELECT pg_advisory_xact_lock(74021)")
                for statement in _SCHEMA:
                    con.execute(statement)
                con.commit()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                con.close()
            if isinstance(exc, psycopg.Error):
                raise self.error("cannot open", exc) from exc
            raise
        self._con = con

    def _live(self) -> Any:
        """The connection, a new one when the last was lost (a PostgreSQL restart, a
        session terminated) or closed after a failed rollback."""
        con = self._con
        if con is not None and con.closed:  # psycopg: a broken connection is closed too
            self._con = None
        return self.connection

    def begin(self) -> LedgerTx:
        return _PostgresTx(self, self._live())

    def _session(self, what: str, work: Callable[[Any], T]) -> T:
        """``work(con)``, one transaction of its own outside any batch (a read, or writes
        it commits itself), always ended here; a driver error is a ``LedgerError``.

        A connection lost while it sat idle (PostgreSQL restarted or killed, the session
        terminated) shows only when it is next used: ``work`` then runs once more, on a
        new connection. Each of these calls may run twice (reads; writes whose second
        run leaves what the first would have: upserts, a prune below the same bound).

        Raises:
            LedgerError: the database failed (the first error, never the rollback's),
                or cannot be reached again.
        """
        psycopg = _psycopg()
        retried = False
        while True:
            con = self._live()
            try:
                try:
                    return work(con)
                finally:
                    _abandon(con)  # a read's end; nothing to undo after a commit
            except psycopg.Error as exc:
                if retried or not con.closed:
                    raise self.error(what, exc) from exc
                retried = True
                log.info("%s; reconnecting", self.error(what, exc))

    def _fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        return self._session("read", lambda con: con.execute(sql, params).fetchone())

    def horizons(self, stream: str, consumer: str) -> list[Horizon]:
        return self._session(
            "read the prune horizon", lambda con: _read_horizons(con, stream, consumer)
        )

    def register(self, mine: Registration, check: Callable[[list[Registration]], None]) -> None:
        def work(con: Any) -> None:
            # The stream's exclusive lock: two Processors starting together are checked
            # one after the other (and a prune or a claim in flight finishes first).
            con.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", (_HORIZON_LOCK, _stream_key(mine.stream))
            )
            check(_registrations(con, mine.stream))
            con.execute(
                f"INSERT INTO {REGISTRY} (stream, consumer, filters, stream_created, ack_floor)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream, consumer) DO UPDATE SET"
                " filters = excluded.filters, stream_created = excluded.stream_created,"
                " ack_floor = excluded.ack_floor, registered_at = now()",
                (
                    mine.stream,
                    mine.consumer,
                    Horizon.key(mine.filters),
                    mine.stream_created,
                    mine.ack_floor,
                ),
            )
            con.commit()

        self._session("register the consumer", work)

    def registrations(self, stream: str) -> list[Registration]:
        return self._session(
            "read the registered consumers", lambda con: _registrations(con, stream)
        )

    def record_floors(self, stream: str, floors: dict[str, int]) -> None:
        def work(con: Any) -> None:
            with con.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {REGISTRY} SET ack_floor = %s WHERE stream = %s AND consumer = %s",
                    [(floor, stream, consumer) for consumer, floor in floors.items()],
                )
            con.commit()

        self._session("record the ack floors", work)

    def handed_back(self, stream: str, consumer: str, life: str) -> dict[int, int]:
        def work(con: Any) -> dict[int, int]:
            with con.cursor() as cursor:
                cursor.execute(
                    f"SELECT seq, attempts FROM {HANDED_BACK}"
                    " WHERE stream = %s AND consumer = %s AND life = %s",
                    (stream, consumer, life),
                )
                return {int(seq): int(attempts) for seq, attempts in cursor.fetchall()}

        return self._session("read the handed-back messages", work)

    def record_handed_back(
        self,
        stream: str,
        consumer: str,
        life: str,
        noted: dict[int, int],
        finished: Sequence[int],
    ) -> None:
        def work(con: Any) -> None:
            with con.cursor() as cursor:
                cursor.execute(
                    f"DELETE FROM {HANDED_BACK} WHERE stream = %s AND consumer = %s AND life <> %s",
                    (stream, consumer, life),
                )
                if noted:
                    cursor.executemany(
                        f"INSERT INTO {HANDED_BACK} (stream, consumer, seq, life, attempts)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream, consumer, seq)"
                        " DO UPDATE SET attempts = EXCLUDED.attempts, life = EXCLUDED.life",
                        [(stream, consumer, seq, life, n) for seq, n in noted.items()],
                    )
                if finished:
                    cursor.executemany(
                        f"DELETE FROM {HANDED_BACK}"
                        " WHERE stream = %s AND consumer = %s AND seq = %s",
                        [(stream, consumer, seq) for seq in finished],
                    )
            con.commit()

        self._session("record the handed-back messages", work)

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
        def work(con: Any) -> int:
            if consumer is not None:
                con.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)", (_HORIZON_LOCK, _stream_key(stream))
                )
            row = con.execute(
                "WITH gone AS (DELETE FROM oncestream_applied WHERE stream = %s AND seq IN ("
                " SELECT seq FROM oncestream_applied WHERE stream = %s AND seq <= %s"
                " ORDER BY seq LIMIT %s) RETURNING seq)"
                " SELECT count(*), min(seq), max(seq) FROM gone",
                (stream, stream, up_to_seq, limit),
            ).fetchone()
            deleted = int(row[0])
            if deleted and consumer is not None:
                owners = [(consumer, Horizon.key(filters))] + [
                    (n.consumer, Horizon.key(n.filters))
                    for n in neighbours
                    if n.consumer != consumer
                ]
                with con.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO {HORIZONS} (stream, consumer, filters, first_seq, last_seq)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream, consumer, filters)"
                        " DO UPDATE SET"
                        f" first_seq = least({HORIZONS}.first_seq, excluded.first_seq),"
                        f" last_seq = greatest({HORIZONS}.last_seq, excluded.last_seq),"
                        " pruned_at = now()",
                        [(stream, name, key, row[1], row[2]) for name, key in owners],
                    )
            if self.key == "msg_id":
                con.execute(
                    "DELETE FROM oncestream_msg_ids WHERE ctid IN ("
                    " SELECT ctid FROM oncestream_msg_ids"
                    " WHERE applied_at < to_timestamp(%s) LIMIT %s)",
                    (time.time() - self.msg_id_retention, limit),
                )
            con.commit()
            return deleted

        return self._session("prune", work)
