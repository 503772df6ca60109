"""The SQLite ledger: the embedded default, in WAL mode."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson

from .._errors import ConfigError, LedgerError, LedgerUnusable
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

__all__ = ["OLD_TABLE", "RUNS", "SQLiteLedger", "write_problem"]

#: SQLite primary result codes that no retry fixes: SQLITE_PERM, SQLITE_READONLY,
#: SQLITE_CORRUPT, SQLITE_CANTOPEN, SQLITE_AUTH, SQLITE_NOTADB.
_UNUSABLE_CODES = frozenset({3, 8, 11, 14, 23, 26})
_CORRUPT_CODES = frozenset({11, 26})
_DAMAGED = (
    "the file is damaged or is not an SQLite database: restore it from a backup, or fix "
    "it with the sqlite3 tool's .recover; an empty ledger in its place would apply again "
    "every message the server redelivers"
)

#: The applied sequences, as runs of consecutive sequences: one row per batch instead
#: of one per message (a Processor's batch is mostly one run), which took about 1 us of
#: the ~9.5 us of client CPU a message cost. SQLite serialises write transactions
#: (BEGIN IMMEDIATE), so a claim's read and insert see every other claim: runs never
#: overlap. (PostgreSQL keeps a row per sequence: concurrent claims there serialise
#: on the primary key, which ranges would not give.)
RUNS = "oncestream_applied_runs"
#: The table of ledgers written before runs (a row per sequence). ``open()`` moves its
#: rows into runs and leaves it empty, guarded by a trigger: an older oncestream that
#: opens the ledger fails on its first claim instead of applying everything again.
OLD_TABLE = "oncestream_applied"

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {RUNS} ("
    " stream TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
    " applied_at REAL NOT NULL, PRIMARY KEY (stream, first_seq)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS oncestream_msg_ids ("
    " stream TEXT NOT NULL, msg_id TEXT NOT NULL, seq INTEGER NOT NULL, applied_at REAL NOT NULL,"
    " PRIMARY KEY (stream, msg_id))",
    "CREATE INDEX IF NOT EXISTS oncestream_msg_ids_age ON oncestream_msg_ids (applied_at)",
    f"CREATE TABLE IF NOT EXISTS {HORIZONS} ("
    " stream TEXT NOT NULL, consumer TEXT NOT NULL, filters TEXT NOT NULL,"
    " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, pruned_at REAL NOT NULL,"
    " PRIMARY KEY (stream, consumer, filters)) WITHOUT ROWID",
    f"CREATE TABLE IF NOT EXISTS {REGISTRY} ("
    " stream TEXT NOT NULL, consumer TEXT NOT NULL, filters TEXT NOT NULL,"
    " stream_created TEXT NOT NULL, ack_floor INTEGER NOT NULL, registered_at REAL NOT NULL,"
    " PRIMARY KEY (stream, consumer)) WITHOUT ROWID",
    f"CREATE TABLE IF NOT EXISTS {HANDED_BACK} ("
    " stream TEXT NOT NULL, consumer TEXT NOT NULL, seq INTEGER NOT NULL,"
    " life TEXT NOT NULL, attempts INTEGER NOT NULL, PRIMARY KEY (stream, consumer, seq))"
    " WITHOUT ROWID",
)
_MIGRATE = (
    f"CREATE TABLE IF NOT EXISTS {OLD_TABLE} ("
    " stream TEXT NOT NULL, seq INTEGER NOT NULL, applied_at REAL NOT NULL,"
    " PRIMARY KEY (stream, seq)) WITHOUT ROWID",
    # Gaps and islands: consecutive sequences share seq - row_number().
    f"INSERT INTO {RUNS} (stream, first_seq, last_seq, applied_at)"
    " SELECT stream, min(seq), max(seq), max(applied_at) FROM ("
    "  SELECT stream, seq, applied_at,"
    "   seq - row_number() OVER (PARTITION BY stream ORDER BY seq) AS island"
    f"  FROM {OLD_TABLE}) GROUP BY stream, island",
    f"DELETE FROM {OLD_TABLE}",
    f"CREATE TRIGGER IF NOT EXISTS {OLD_TABLE}_moved BEFORE INSERT ON {OLD_TABLE} BEGIN"
    " SELECT RAISE(ABORT, 'this ledger keeps applied sequences in oncestream_applied_runs"
    ": an older oncestream opened it; use the version that upgraded it'); END",
)
#: The run that may cover ``lo`` from below, and every run starting in ``[lo, hi]``:
#: two index seeks, however many runs the ledger holds.
_OVERLAPPING = (
    f"SELECT first_seq, last_seq FROM (SELECT first_seq, last_seq FROM {RUNS}"
    " WHERE stream = ? AND first_seq < ? ORDER BY first_seq DESC LIMIT 1)"
    f" UNION ALL SELECT first_seq, last_seq FROM {RUNS}"
    " WHERE stream = ? AND first_seq BETWEEN ? AND ?"
)
_INSERT_RUN = f"INSERT INTO {RUNS} (stream, first_seq, last_seq, applied_at) VALUES (?, ?, ?, ?)"
#: Runs of one sequence each, from a JSON array of their sequences: one statement whose
#: loop runs in SQLite. A partition's batch (a group member's) is mostly such runs, as
#: the other partitions' messages lie between its sequences; bound one by one with
#: ``executemany``, a run cost 0.9-1.0 us of CPU against 0.3-0.45 this way (500 runs
#: a transaction, WAL; docs/production.md, "Scaling").
_INSERT_SINGLES = (
    f"INSERT INTO {RUNS} (stream, first_seq, last_seq, applied_at)"
    " SELECT ?, value, value, ? FROM json_each(?)"
)
#: Below this many runs a batch's runs are bound one by one (the usual lone Processor's
#: batch is one run).
_MANY_RUNS = 16
_HORIZONS = f"SELECT first_seq, last_seq, filters FROM {HORIZONS} WHERE stream = ? AND consumer = ?"
_RAISE_HORIZON = (
    f"INSERT INTO {HORIZONS} (stream, consumer, filters, first_seq, last_seq, pruned_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (stream, consumer, filters) DO UPDATE SET"
    " first_seq = min(first_seq, excluded.first_seq),"
    " last_seq = max(last_seq, excluded.last_seq), pruned_at = excluded.pruned_at"
)


_REGISTRATIONS = (
    f"SELECT stream, consumer, filters, stream_created, ack_floor FROM {REGISTRY}"
    " WHERE stream = ? ORDER BY consumer"
)
_REGISTER = (
    f"INSERT INTO {REGISTRY} (stream, consumer, filters, stream_created, ack_floor,"
    " registered_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (stream, consumer) DO UPDATE SET"
    " filters = excluded.filters, stream_created = excluded.stream_created,"
    " ack_floor = excluded.ack_floor, registered_at = excluded.registered_at"
)


_REGISTERED = f"SELECT filters FROM {REGISTRY} WHERE stream = ? AND consumer = ?"


def _registrations(con: sqlite3.Connection, stream: str) -> list[Registration]:
    return [
        Registration(s, c, tuple(f.split()), created, int(floor))
        for s, c, f, created, floor in con.execute(_REGISTRATIONS, (stream,))
    ]


def _horizons(con: sqlite3.Connection, stream: str, consumer: str) -> list[Horizon]:
    return [
        Horizon(first, last, tuple(filters.split()))
        for first, last, filters in con.execute(_HORIZONS, (stream, consumer))
    ]


def _runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` of each run of consecutive numbers in sorted, unique ``seqs``."""
    if not seqs:
        return []
    if seqs[-1] - seqs[0] + 1 == len(seqs):
        return [(seqs[0], seqs[-1])]  # the usual batch: one run
    runs = []
    first = last = seqs[0]
    for seq in seqs[1:]:
        if seq != last + 1:
            runs.append((first, last))
            first = seq
        last = seq
    runs.append((first, last))
    return runs


def _uncovered(seqs: Sequence[int], covering: list[tuple[int, int]]) -> list[bool]:
    """Per sorted sequence: True when no ``(first, last)`` run covers it."""
    covering.sort()
    fresh = []
    index, count = 0, len(covering)
    for seq in seqs:
        while index < count and covering[index][1] < seq:
            index += 1
        fresh.append(index == count or covering[index][0] > seq)
    return fresh


def _has_json_each(con: sqlite3.Connection) -> bool:
    try:
        con.execute("SELECT value FROM json_each('[1]')").fetchall()
    except sqlite3.OperationalError:  # "no such table: json_each": built without JSON
        return False
    return True


class _SQLiteTx(LedgerTx):
    def __init__(self, ledger: SQLiteLedger, connection: sqlite3.Connection) -> None:
        self.ledger = ledger
        self.connection: sqlite3.Connection = connection
        self.open = True
        # Bound C methods: no Python frame per handler statement on the hot path.
        self.execute = connection.execute  # type: ignore[method-assign,assignment]
        self.executemany = connection.executemany  # type: ignore[method-assign,assignment]

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        return self.connection.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> sqlite3.Cursor:
        return self.connection.executemany(sql, rows)

    def claim(self, entries: Sequence[LedgerEntry]) -> list[bool]:
        if not entries:
            return []
        now = time.time()
        try:
            if entries[0].stream == entries[-1].stream:  # sorted by stream: one stream
                fresh = self._claim_seqs(entries[0].stream, [e.seq for e in entries], now)
            else:
                fresh = []
                by_stream: dict[str, list[int]] = {}
                for entry in entries:
                    by_stream.setdefault(entry.stream, []).append(entry.seq)
                for stream, seqs in by_stream.items():  # in the entries' (sorted) order
                    fresh += self._claim_seqs(stream, seqs, now)
            if self.ledger.key == "msg_id":
                fresh = self._claim_ids(entries, fresh, now)
        except sqlite3.Error as exc:
            raise self.ledger.failure("claim", exc) from exc
        return fresh

    def _claim_seqs(self, stream: str, seqs: list[int], now: float) -> list[bool]:
        """Record the sorted ``seqs`` of ``stream`` as runs; per sequence, whether it was new."""
        con = self.connection
        lo, hi = seqs[0], seqs[-1]
        covering = [
            (first, last)
            for first, last in con.execute(_OVERLAPPING, (stream, lo, stream, lo, hi))
            if last >= lo
        ]
        if not covering:
            new = seqs
            fresh = [True] * len(seqs)
        else:
            fresh = _uncovered(seqs, covering)
            new = [seq for seq, is_new in zip(seqs, fresh, strict=True) if is_new]
        runs = _runs(new)
        if len(runs) == 1:
            con.execute(_INSERT_RUN, (stream, runs[0][0], runs[0][1], now))
        elif len(runs) >= _MANY_RUNS and self.ledger.json_each:
            singles = [first for first, last in runs if first == last]
            con.execute(_INSERT_SINGLES, (stream, now, orjson.dumps(singles)))
            if len(singles) < len(runs):
                longer = [(stream, first, last, now) for first, last in runs if first != last]
                con.executemany(_INSERT_RUN, longer)
        elif runs:
            con.executemany(_INSERT_RUN, [(stream, first, last, now) for first, last in runs])
        return fresh

    def _claim_ids(
        self, entries: Sequence[LedgerEntry], fresh: list[bool], now: float
    ) -> list[bool]:
        con = self.connection
        taken: set[tuple[str, str]] = set()
        ids = [(e.stream, e.msg_id) for e in entries if e.msg_id]
        for start in range(0, len(ids), 400):
            chunk = ids[start : start + 400]
            for stream in {s for s, _ in chunk}:
                names = [i for s, i in chunk if s == stream]
                marks = ",".join("?" * len(names))
                rows = con.execute(
                    "SELECT msg_id FROM oncestream_msg_ids"
                    f" WHERE stream = ? AND msg_id IN ({marks})",
                    (stream, *names),
                ).fetchall()
                taken.update((stream, row[0]) for row in rows)
        result = []
        new_ids = []
        for entry, new in zip(entries, fresh, strict=True):
            if new and entry.msg_id:
                key = (entry.stream, entry.msg_id)
                if key in taken:
                    new = False
                else:
                    taken.add(key)
                    new_ids.append((entry.stream, entry.msg_id, entry.seq, now))
            result.append(new)
        con.executemany(
            "INSERT INTO oncestream_msg_ids (stream, msg_id, seq, applied_at) VALUES (?, ?, ?, ?)",
            new_ids,
        )
        return result

    def horizons(self, stream: str, consumer: str) -> list[Horizon]:
        try:
            return _horizons(self.connection, stream, consumer)
        except sqlite3.Error as exc:  # the first step of a claim, and reported as one
            raise self.ledger.failure("claim", exc) from exc

    def registered(self, stream: str, consumer: str) -> tuple[str, ...] | None:
        try:
            row = self.connection.execute(_REGISTERED, (stream, consumer)).fetchone()
        except sqlite3.Error as exc:
            raise self.ledger.failure("claim", exc) from exc
        return None if row is None else tuple(row[0].split())

    def commit(self) -> None:
        if self.open:
            self.open = False
            try:
                self.connection.execute("COMMIT")
            except sqlite3.Error as exc:
                self._quiet_rollback()
                raise self.ledger.failure("commit", exc) from exc

    def rollback(self) -> None:
        if self.open:
            self.open = False
            self._quiet_rollback()

    def _quiet_rollback(self) -> None:
        if self.connection.in_transaction:
            try:
                self.connection.execute("ROLLBACK")
            except sqlite3.Error:
                pass


class SQLiteLedger(Ledger):
    """A ledger in an SQLite file (WAL mode), shared with the handler's own tables.

    Args:
        path: database file (created if absent); the handler's tables live in it too.
        key: ``"sequence"`` or ``"msg_id"`` (see :class:`Ledger`).
        synchronous: SQLite ``synchronous`` pragma. ``"FULL"`` (default) makes
            each commit durable before the ack is sent, even across power loss;
            ``"NORMAL"`` is faster and still survives process crashes (WAL),
            but a power cut may undo acked work.
        busy_timeout: seconds to wait for another writer's lock.
        msg_id_retention: seconds msg-id rows are kept (``key="msg_id"`` only).
        tables: create the ledger tables on open (False: only transactions).

    Example::

        ledger = SQLiteLedger("orders.db")
    """

    inline = True

    def __init__(
        self,
        path: str | Path,
        *,
        key: KeyMode = "sequence",
        synchronous: Literal["FULL", "NORMAL", "EXTRA"] = "FULL",
        busy_timeout: float = 30.0,
        msg_id_retention: float = 7 * 86400.0,
        tables: bool = True,
    ) -> None:
        self.path = str(path)
        self.tables = tables
        self.key = check_key(key)
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ConfigError(f"synchronous must be FULL, NORMAL or EXTRA, got {synchronous!r}")
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.msg_id_retention = msg_id_retention
        self._con: sqlite3.Connection | None = None
        #: SQLite has ``json_each`` (built in since 3.38, an option before): claims of
        #: many runs are then one statement (set when the connection opens).
        self.json_each = False

    def __repr__(self) -> str:
        return f"SQLiteLedger({self.path!r}, key={self.key!r})"

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection (opened on first use)."""
        if self._con is None:
            self.open()
        assert self._con is not None
        return self._con

    def interrupt(self) -> None:
        con = self._con
        if con is not None:
            with contextlib.suppress(sqlite3.Error):  # closed meanwhile: nothing runs
                con.interrupt()

    def is_transient(self, exc: BaseException) -> bool:
        text = str(exc).lower()
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in text or "busy" in text or "disk i/o" in text
        )

    def is_unusable(self, exc: BaseException) -> bool:
        if not isinstance(exc, sqlite3.Error):
            return False
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _UNUSABLE_CODES:
            return True
        text = str(exc).lower()
        return "malformed" in text or "not a database" in text or "readonly database" in text

    def failure(self, what: str, exc: BaseException) -> LedgerError:
        """The error for a failed SQLite call: :class:`LedgerUnusable` naming the cause when
        retrying cannot help, else a :class:`LedgerError` (retried by the Processor)."""
        if not self.is_unusable(exc):
            held = ""
            if "locked" in str(exc).lower():
                held = (
                    f" (another process held its write lock for the whole busy timeout, "
                    f"{self.busy_timeout:g}s)"
                )
            return LedgerError(f"SQLite ledger {self.path}: {what}: {exc}{held}")
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        text = str(exc).lower()
        if code in _CORRUPT_CODES or "malformed" in text or "not a database" in text:
            cause = _DAMAGED
        else:
            cause = write_problem(self.path) or "it cannot be opened for writing"
        return LedgerUnusable(f"SQLite ledger {self.path} cannot be used ({what}: {exc}): {cause}")

    def open(self) -> None:
        if self._con is not None:
            return
        con: sqlite3.Connection | None = None
        try:
            con = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout,
            )
            con.execute("PRAGMA journal_mode=WAL")
            con.execute(f"PRAGMA synchronous={self.synchronous}")
            if self.tables:
                self._create_tables(con)
            self.json_each = _has_json_each(con)
        except sqlite3.Error as exc:
            if con is not None:
                con.close()
            raise self.failure("open", exc) from exc
        self._con = con

    @staticmethod
    def _create_tables(con: sqlite3.Connection) -> None:
        """The ledger's tables; rows of the per-sequence table (older ledgers) become runs."""
        con.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                con.execute(statement)
            guarded = con.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                (f"{OLD_TABLE}_moved",),
            ).fetchone()
            if guarded is None:
                for statement in _MIGRATE:
                    con.execute(statement)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def is_applied(self, entry: LedgerEntry) -> bool:
        row = self._fetchone(
            f"SELECT last_seq FROM {RUNS} WHERE stream = ? AND first_seq <= ?"
            " ORDER BY first_seq DESC LIMIT 1",
            (entry.stream, entry.seq),
        )
        if row is not None and row[0] >= entry.seq:
            return True
        if self.key == "msg_id" and entry.msg_id:
            row = self._fetchone(
                "SELECT 1 FROM oncestream_msg_ids WHERE stream = ? AND msg_id = ?",
                (entry.stream, entry.msg_id),
            )
            return row is not None
        return False

    def applied_count(self, stream: str | None = None) -> int:
        total = f"SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM {RUNS}"
        if stream is None:
            return int(self._fetchone(total, ())[0])
        return int(self._fetchone(total + " WHERE stream = ?", (stream,))[0])

    def begin(self) -> LedgerTx:
        con = self.connection
        try:
            con.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self.failure("begin", exc) from exc
        return _SQLiteTx(self, con)

    def begin_nowait(self) -> LedgerTx | None:
        con = self.connection
        # Without a busy timeout, a lock held by another process fails at once
        # instead of blocking this thread (the event loop's) for up to busy_timeout.
        con.execute("PRAGMA busy_timeout = 0")
        try:
            con.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (5, 6):  # SQLITE_BUSY, _LOCKED
                return None
            raise self.failure("begin", exc) from exc
        finally:
            con.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return _SQLiteTx(self, con)

    def _fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        return self.connection.execute(sql, params).fetchone()

    def horizons(self, stream: str, consumer: str) -> list[Horizon]:
        try:
            return _horizons(self.connection, stream, consumer)
        except sqlite3.Error as exc:
            raise self.failure("read the prune horizon", exc) from exc

    def register(self, mine: Registration, check: Callable[[list[Registration]], None]) -> None:
        con = self.connection
        try:
            with _immediate(con):
                check(_registrations(con, mine.stream))
                con.execute(
                    _REGISTER,
                    (
                        mine.stream,
                        mine.consumer,
                        Horizon.key(mine.filters),
                        mine.stream_created,
                        mine.ack_floor,
                        time.time(),
                    ),
                )
        except sqlite3.Error as exc:
            raise self.failure("register the consumer", exc) from exc

    def registrations(self, stream: str) -> list[Registration]:
        try:
            return _registrations(self.connection, stream)
        except sqlite3.Error as exc:
            raise self.failure("read the registered consumers", exc) from exc

    def record_floors(self, stream: str, floors: dict[str, int]) -> None:
        try:
            self.connection.executemany(
                f"UPDATE {REGISTRY} SET ack_floor = ? WHERE stream = ? AND consumer = ?",
                [(floor, stream, consumer) for consumer, floor in floors.items()],
            )
        except sqlite3.Error as exc:
            raise self.failure("record the ack floors", exc) from exc

    def handed_back(self, stream: str, consumer: str, life: str) -> dict[int, int]:
        try:
            rows = self.connection.execute(
                f"SELECT seq, attempts FROM {HANDED_BACK}"
                " WHERE stream = ? AND consumer = ? AND life = ?",
                (stream, consumer, life),
            ).fetchall()
        except sqlite3.Error as exc:
            raise self.failure("read the handed-back messages", exc) from exc
        return {int(seq): int(attempts) for seq, attempts in rows}

    def record_handed_back(
        self,
        stream: str,
        consumer: str,
        life: str,
        noted: dict[int, int],
        finished: Sequence[int],
    ) -> None:
        con = self.connection
        try:
            with _immediate(con):
                con.execute(
                    f"DELETE FROM {HANDED_BACK} WHERE stream = ? AND consumer = ? AND life <> ?",
                    (stream, consumer, life),
                )
                con.executemany(
                    f"INSERT INTO {HANDED_BACK} (stream, consumer, seq, life, attempts)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (stream, consumer, seq)"
                    " DO UPDATE SET attempts = excluded.attempts, life = excluded.life",
                    [(stream, consumer, seq, life, n) for seq, n in noted.items()],
                )
                con.executemany(
                    f"DELETE FROM {HANDED_BACK} WHERE stream = ? AND consumer = ? AND seq = ?",
                    [(stream, consumer, seq) for seq in finished],
                )
        except sqlite3.Error as exc:
            raise self.failure("record the handed-back messages", exc) from exc

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
        """Forget the sequences ``<= up_to_seq`` of at most ``limit`` runs; how many sequences.

        A run that reaches past ``up_to_seq`` is cut short at its start. With
        ``consumer``, the span forgotten joins its horizon in the same transaction.
        """
        con = self.connection
        try:
            con.execute("BEGIN IMMEDIATE")
            deleted = 0
            runs = con.execute(
                f"SELECT first_seq, last_seq FROM {RUNS} WHERE stream = ? AND first_seq <= ?"
                " ORDER BY first_seq LIMIT ?",
                (stream, up_to_seq, limit),
            ).fetchall()
            for first, last in runs:
                if last <= up_to_seq:
                    con.execute(
                        f"DELETE FROM {RUNS} WHERE stream = ? AND first_seq = ?", (stream, first)
                    )
                    deleted += last - first + 1
                else:
                    con.execute(
                        f"UPDATE {RUNS} SET first_seq = ? WHERE stream = ? AND first_seq = ?",
                        (up_to_seq + 1, stream, first),
                    )
                    deleted += up_to_seq + 1 - first
            if runs and consumer is not None:
                span = (runs[0][0], max(min(last, up_to_seq) for _, last in runs))
                now = time.time()
                con.executemany(
                    _RAISE_HORIZON,
                    [(stream, consumer, Horizon.key(filters), *span, now)]
                    + [
                        (stream, n.consumer, Horizon.key(n.filters), *span, now)
                        for n in neighbours
                        if n.consumer != consumer
                    ],
                )
            if self.key == "msg_id":
                con.execute(
                    "DELETE FROM oncestream_msg_ids WHERE rowid IN ("
                    " SELECT rowid FROM oncestream_msg_ids WHERE applied_at < ? LIMIT ?)",
                    (time.time() - self.msg_id_retention, limit),
                )
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise self.failure("prune", exc) from exc
        return int(deleted)


def write_problem(path: str) -> str | None:
    """Why SQLite cannot write the database ``path`` (and its ``-wal``/``-shm`` files), if
    the file system says so: a read-only mount, a directory or file without write permission.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    try:
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            return f"the file system holding {parent} is mounted read-only"
    except OSError:
        pass
    for name in (path, f"{path}-wal", f"{path}-shm"):
        if os.path.exists(name) and not os.access(name, os.W_OK):
            return f"{name} is not writable (permission denied)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return (
            f"directory {parent} is not writable (permission denied); SQLite creates "
            f"{os.path.basename(path)}-wal and -shm files beside the ledger"
        )
    return None


@contextlib.contextmanager
def _immediate(con: sqlite3.Connection) -> Iterator[None]:
    """A write transaction of its own (``BEGIN IMMEDIATE``): committed at the end, rolled
    back on any exception (the commit's own included)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
