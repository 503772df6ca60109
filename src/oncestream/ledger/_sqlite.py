"""The SQLite ledger: the embedded default, in WAL mode."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .._errors import ConfigError, LedgerError, LedgerUnusable
from ._base import KeyMode, Ledger, LedgerEntry, LedgerTx, check_key

__all__ = ["SQLiteLedger", "write_problem"]

#: SQLite primary result codes that no retry fixes: SQLITE_PERM, SQLITE_READONLY,
#: SQLITE_CORRUPT, SQLITE_CANTOPEN, SQLITE_AUTH, SQLITE_NOTADB.
_UNUSABLE_CODES = frozenset({3, 8, 11, 14, 23, 26})
_CORRUPT_CODES = frozenset({11, 26})
_DAMAGED = (
    "the file is damaged or is not an SQLite database: restore it from a backup, or fix "
    "it with the sqlite3 tool's .recover; an empty ledger in its place would apply again "
    "every message the server redelivers"
)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS oncestream_applied ("
    " stream TEXT NOT NULL, seq INTEGER NOT NULL, applied_at REAL NOT NULL,"
    " PRIMARY KEY (stream, seq)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS oncestream_msg_ids ("
    " stream TEXT NOT NULL, msg_id TEXT NOT NULL, seq INTEGER NOT NULL, applied_at REAL NOT NULL,"
    " PRIMARY KEY (stream, msg_id))",
    "CREATE INDEX IF NOT EXISTS oncestream_msg_ids_age ON oncestream_msg_ids (applied_at)",
)


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
        con = self.connection
        now = time.time()
        try:
            seen: set[tuple[str, int]] = set()
            streams = {e.stream for e in entries}
            for stream in streams:
                seqs = [e.seq for e in entries if e.stream == stream]
                rows = con.execute(
                    "SELECT seq FROM oncestream_applied WHERE stream = ? AND seq BETWEEN ? AND ?",
                    (stream, min(seqs), max(seqs)),
                ).fetchall()
                seen.update((stream, row[0]) for row in rows)
            fresh = [(e.stream, e.seq) not in seen for e in entries]
            con.executemany(
                "INSERT INTO oncestream_applied (stream, seq, applied_at) VALUES (?, ?, ?)",
                [(e.stream, e.seq, now) for e, new in zip(entries, fresh, strict=True) if new],
            )
            if self.ledger.key == "msg_id":
                fresh = self._claim_ids(entries, fresh, now)
        except sqlite3.Error as exc:
            raise self.ledger.failure("claim", exc) from exc
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

    def __repr__(self) -> str:
        return f"SQLiteLedger({self.path!r}, key={self.key!r})"

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection (opened on first use)."""
        if self._con is None:
            self.open()
        assert self._con is not None
        return self._con

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
            for statement in _SCHEMA if self.tables else ():
                con.execute(statement)
        except sqlite3.Error as exc:
            if con is not None:
                con.close()
            raise self.failure("open", exc) from exc
        self._con = con

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

    def prune(self, stream: str, up_to_seq: int, limit: int = 10_000) -> int:
        con = self.connection
        try:
            con.execute("BEGIN IMMEDIATE")
            deleted = con.execute(
                "DELETE FROM oncestream_applied WHERE stream = ? AND seq IN ("
                " SELECT seq FROM oncestream_applied WHERE stream = ? AND seq <= ?"
                " ORDER BY seq LIMIT ?)",
                (stream, stream, up_to_seq, limit),
            ).rowcount
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
