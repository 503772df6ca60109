"""A PostgreSQL batch's handler writes, sent in pipeline mode at libpq's cost, ended by Syncs.

Inside :meth:`LedgerTx.pipeline` (a per-message handler's batch), ``tx.execute`` of
a write that returns no rows (``INSERT``/``UPDATE``/``DELETE``/``MERGE`` without
``RETURNING``, ``%s`` placeholders, a tuple or list of parameters) skips psycopg's
cursor: its parameters are adapted by psycopg's own dumpers, the statement is
prepared once per connection, and its Bind/Execute go straight into libpq's pipeline
buffer. psycopg's ``execute`` in pipeline mode costs ~23 us of client CPU a
statement (a cursor, a poll and a send() each); this ~3 us. Anything else (reads,
``RETURNING``, other placeholder styles, ``tx.connection``) goes through psycopg as
before, in the same pipeline and order.

**Every byte the server has received ends with a Sync.** The writes stay in libpq's
buffer until a Sync goes with them (every ~32 KiB, when a result is read, and when
the block ends): a process frozen (SIGSTOP, a stuck VM) anywhere in its handlers
leaves its session ``idle in transaction``, never ``active`` waiting for the rest of
a batch, so ``idle_in_transaction_session_timeout`` ends it and a standby can take
over. (psycopg sends each statement at once without a Sync: a session frozen after
one stays ``active`` and the timeout never fires.) A Sync inside a transaction block
ends no transaction: the effects and the ledger rows still commit together.

**Nothing follows the last Sync.** PostgreSQL stops the timeout's clock whenever it
reads a message and starts it again only after a Sync; psycopg, waiting for the
results of a pipeline's last Sync (the block's end, a cursor's fetch), sends a Flush
behind it, which stops the clock until the next Sync, the batch's ``COMMIT``. A
process frozen while it waits for those results (a batch's last moments) would leave
its session idle in its transaction forever, its locks held. :func:`sync_not_flush`
makes the block's pipeline wait with a Sync instead (the server sends its results at
a Sync anyway).

psycopg's pipeline bookkeeping is used as psycopg uses it (``result_queue`` gets one
entry per command, in order); :func:`supported` checks that it is there, and the
writes go through psycopg's cursor otherwise.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["PipelinedResult", "PipelinedWrites", "supported", "sync_not_flush"]

#: A write that returns no rows: what the fast path takes (leading spaces, any case).
_WRITE = re.compile(r"\s*(insert|update|delete|merge)\s", re.IGNORECASE)
_RETURNING = re.compile(r"\breturning\b", re.IGNORECASE)
_MARK = re.compile(r"%(.|$)", re.DOTALL)
#: Estimated bytes buffered before a Sync sends them: below libpq's own flush
#: threshold (64 KiB in pipeline mode), which would send writes without their Sync.
_SYNC_EVERY = 32 * 1024
_names = itertools.count(1)
#: libpq's PGRES_FATAL_ERROR and PGRES_PIPELINE_ABORTED (psycopg.pq.ExecStatus).
_FATAL_ERROR = 7
_PIPELINE_ABORTED = 11


def supported(pipeline: Any) -> bool:
    """True when psycopg's pipeline has the bookkeeping the fast path feeds."""
    return (
        hasattr(pipeline, "result_queue")
        and hasattr(pipeline, "command_queue")
        and hasattr(pipeline, "_communicate_gen")
        and hasattr(pipeline, "_fetch_gen")
        and hasattr(pipeline, "_enqueue_sync")
    )


def sync_not_flush(pipeline: Any) -> Callable[[], None]:
    """Make ``pipeline`` wait for results behind a Sync, never behind a Flush; returns
    what undoes it (to call once the pipeline block has ended).

    psycopg asks for results still to come with a Flush (``_fetch_gen(flush=True)``):
    at the end of a pipeline block, right behind the block's Sync, and when a cursor
    fetches inside one. The server reads that Flush after the Sync, and its
    ``idle_in_transaction_session_timeout`` then stays off until the next Sync: a
    process frozen while it waits (SIGSTOP, a stuck VM) would hold its transaction and
    its locks forever. Here the wait is behind a Sync: the one already sent when the
    last command queued is a Sync (the block's end), a new one otherwise.
    """
    from psycopg.generators import send

    fetch = pipeline._fetch_gen
    pgconn = pipeline.pgconn

    def fetch_gen(*, flush: bool) -> Any:
        if flush and pipeline.result_queue:
            if pipeline.result_queue[-1] is not None:  # None: psycopg's entry for a Sync
                pipeline._enqueue_sync()
            if pipeline.command_queue:
                yield from pipeline._communicate_gen()
            yield from send(pgconn)  # every byte out, the Sync last
        yield from fetch(flush=False)

    pipeline._fetch_gen = fetch_gen

    def undo() -> None:
        if pipeline.__dict__.get("_fetch_gen") is fetch_gen:
            del pipeline._fetch_gen

    return undo


#: ``INSERT INTO t (a, b) VALUES (%s, %s)``: one row of placeholders and nothing else.
_ONE_ROW = re.compile(
    r"(\s*insert\s+into\s+[^()]+?\s*\([^()]*\)\s*values\s*)\(\s*%s(?:\s*,\s*%s)*\s*\)\s*;?\s*",
    re.IGNORECASE,
)
#: Rows per merged INSERT: a group is cut into these sizes (greedy), so that a statement
#: has at most this many prepared forms per parameter types.
_CHUNKS = (256, 64, 16, 4, 1)


def _merged_sql(head: str, columns: int, rows: int) -> bytes:
    """``head`` followed by ``rows`` rows of ``columns`` numbered placeholders."""
    values = ", ".join(
        "(" + ", ".join(f"${row * columns + col + 1}" for col in range(columns)) + ")"
        for row in range(rows)
    )
    return (head + values).encode()


def _merge_head(sql: str) -> str | None:
    """The ``INSERT INTO t (cols) VALUES `` of a one-row insert of placeholders, or None."""
    match = _ONE_ROW.fullmatch(sql)
    return None if match is None else match.group(1)


#: The table of ``INSERT INTO <table> (``: a name, or a schema-qualified one, of plain or
#: quoted identifiers (anything else, an alias included, is never merged by ``"auto"``:
#: ``to_regclass`` raises on some other spellings, which would fail the batch).
_IDENT = r'(?:"[^"\x00]+"|[A-Za-z_][A-Za-z0-9_$]*)'
_TABLE = re.compile(rf"\s*insert\s+into\s+({_IDENT}(?:\s*\.\s*{_IDENT})?)\s*\(", re.I)
#: Whether a table takes merged inserts unseen (``"auto"``): a plain table (not a view,
#: nor a partitioned table, whose partitions may have triggers) without triggers, rules
#: or row-level security (a policy's subquery would not see the rows merged before its
#: own). ``relhastriggers`` counts a foreign key's internal triggers too (their checks
#: would run at the end of a merged INSERT).
_PLAIN_TABLE = (
    "SELECT c.relkind = 'r' AND NOT c.relhastriggers AND NOT c.relhasrules"
    " AND NOT c.relrowsecurity"
    " FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass(%s)"
)


def _merge_table(sql: str) -> str | None:
    """The table a mergeable one-row insert writes, as written (None: not a plain name)."""
    match = _TABLE.match(sql)
    return None if match is None else match.group(1)


def _plan(sql: str) -> tuple[bytes, int] | None:
    """``sql`` with ``$1..$n`` for its ``%s`` (and ``%`` for ``%%``), and n; None when
    it is not a write without rows or has another placeholder (``%(name)s``, ``%b``)."""
    if not _WRITE.match(sql) or _RETURNING.search(sql):
        return None
    count = 0
    other = False

    def placeholder(match: re.Match[str]) -> str:
        nonlocal count, other
        kind = match.group(1)
        if kind == "s":
            count += 1
            return f"${count}"
        if kind == "%":
            return "%"
        other = True
        return ""

    text = _MARK.sub(placeholder, sql)
    return None if other else (text.encode(), count)


class PipelinedResult:
    """What ``tx.execute`` returns for a pipelined write: its outcome, once read.

    Reading :attr:`rowcount` or :attr:`statusmessage` sends what is buffered and
    waits for the results (a round trip, as psycopg's cursor does in pipeline mode).
    A write returns no rows: the fetch methods raise ``psycopg.ProgrammingError``.
    """

    __slots__ = ("_outcome", "_writes")

    def __init__(self, writes: PipelinedWrites | None) -> None:
        self._writes = writes
        #: The statement's PGresults, or (rows changed, command status), once known.
        self._outcome: Any = None

    # psycopg's pipeline hands a command's results to the object queued for it.
    def _check_results(self, results: list[Any]) -> None:
        for result in results:
            status = result.status
            if status in (_FATAL_ERROR, _PIPELINE_ABORTED):
                from psycopg import errors

                if status == _PIPELINE_ABORTED:
                    raise errors.PipelineAborted("pipeline aborted")
                raise errors.error_from_result(result, encoding=_encoding(self._writes))

    def _set_results(self, results: list[Any]) -> None:
        self._outcome = results  # read when asked (most never are)

    def _settled(self) -> tuple[int, bytes | None]:
        if self._outcome is None and self._writes is not None:
            self._writes.wait_results()
        result = self._outcome
        if isinstance(result, list):
            if not result:
                return (-1, None)
            tuples = result[-1].command_tuples
            return (-1 if tuples is None else int(tuples), result[-1].command_status)
        return result or (-1, None)

    @property
    def rowcount(self) -> int:
        """Rows the write changed (-1 when unknown)."""
        return self._settled()[0]

    @property
    def statusmessage(self) -> str | None:
        """The command's status, e.g. ``INSERT 0 1``."""
        status = self._settled()[1]
        return None if status is None else bytes(status).decode()

    def _no_rows(self) -> Any:
        import psycopg

        raise psycopg.ProgrammingError(
            f"the last operation didn't produce records (command status: {self.statusmessage})"
        )

    def fetchone(self) -> Any:
        return self._no_rows()

    def fetchmany(self, size: int = 0) -> Any:
        return self._no_rows()

    def fetchall(self) -> Any:
        return self._no_rows()

    def __iter__(self) -> Any:
        return self._no_rows()

    def close(self) -> None:
        """Nothing to release (for code that closes what ``execute`` returned)."""


class _MergedRows(PipelinedResult):
    """The results of one merged INSERT, handed to each of its rows' results (one row each)."""

    __slots__ = ("rows",)

    def __init__(self, writes: PipelinedWrites, rows: list[PipelinedResult]) -> None:
        super().__init__(writes)
        self.rows = rows

    def _set_results(self, results: list[Any]) -> None:
        for row in self.rows:
            row._outcome = (1, b"INSERT 0 1")


class _FlushingQueue(deque[Any]):
    """psycopg's command queue, which first sends the merged rows waiting in front of
    whatever psycopg queues (a statement through ``tx.connection``): order is kept."""

    def __init__(self, writes: PipelinedWrites) -> None:
        super().__init__()
        self.writes = writes

    def append(self, command: Any) -> None:
        if self.writes.group:
            self.writes.send_group()
        super().append(command)


def _encoding(writes: PipelinedWrites | None) -> str:
    return writes.encoding if writes is not None else "utf-8"


class PipelinedWrites:
    """The fast path of one pipeline block on one connection (see the module docstring).

    Args:
        connection: the psycopg connection, in a transaction, inside ``pipeline``.
        pipeline: what ``connection.pipeline()`` returned.
        prepared: ``(sql, parameter types[, rows]) -> statement name`` for this connection
            (kept by the ledger across batches; names prepared here are dropped
            again when the block fails, as their Parse may not have run).
        merge: send consecutive one-row ``INSERT ... VALUES (%s, ...)`` of one statement
            as multi-row INSERTs (``PostgresLedger(merge_inserts=True)``); ``"auto"``:
            only into plain tables without triggers, rules or row-level security, as
            the server says after the first such insert into each table in the block
            (a round trip; that insert is sent as it is).
    """

    def __init__(
        self,
        connection: Any,
        pipeline: Any,
        prepared: dict[tuple[Any, ...], bytes],
        *,
        merge: bool | str = False,
    ) -> None:
        from psycopg.adapt import PyFormat, Transformer

        self.connection = connection
        self.pgconn = connection.pgconn
        self.pipeline = pipeline
        self.prepared = prepared
        self.encoding = connection.info.encoding
        self._transformer = Transformer.from_context(connection)
        self._auto = PyFormat.AUTO
        self._auto_formats: dict[int, list[Any]] = {}
        self._plans: dict[str, tuple[bytes, int] | None] = {}
        self._new: list[tuple[Any, ...]] = []
        self._buffered = 0  # estimated bytes sent to libpq since the last Sync
        self._ignore = PipelinedResult(None)
        #: Merging: consecutive one-row inserts of one statement, not sent yet.
        self.merge = bool(merge)
        #: ``"auto"``: per table written, whether it takes merged inserts (None: ask).
        self._tables: dict[str, bool] | None = {} if merge == "auto" else None
        self._asking: str | None = None
        self.group: list[PipelinedResult] = []
        self._group_key: tuple[str, Any] | None = None
        self._group_values: list[Any] = []
        self._group_head = ""
        self._group_formats: list[Any] = []
        self._heads: dict[str, str | None] = {}
        self._queue = pipeline.command_queue
        if merge:
            pipeline.command_queue = _FlushingQueue(self)
            pipeline.command_queue.extend(self._queue)

    def execute(self, sql: Any, params: Any) -> PipelinedResult | None:
        """Queue ``sql`` if the fast path takes it (its result), else None."""
        if not isinstance(sql, str):
            return None
        plans = self._plans
        try:
            plan = plans[sql]
        except KeyError:
            plan = plans[sql] = _plan(sql)
        if plan is None:
            return None
        query, count = plan
        if (type(params) is not tuple and type(params) is not list) or len(params) != count:
            return None  # psycopg says what is wrong with them
        transformer = self._transformer
        values: Any
        if count:
            values = transformer.dump_sequence(params, self._formats(count))
            types = transformer.types
        else:
            values = types = ()
        key = (sql, types)
        if self.merge:
            head = self._head(sql)
            if head is not None and count:
                return self._add_row(key, head, values, count)
            if self.group:
                self.send_group()
        name = self.prepared.get(key)
        queue = self.pipeline.result_queue
        if name is None:
            name = self.prepared[key] = b"oncestream_%d" % next(_names)
            self._new.append(key)
            self.pgconn.send_prepare(name, query, param_types=types)
            queue.append((self._ignore, None))
            self._buffered += len(query) + 64
        try:
            size = 64 + 8 * count + sum(map(len, values))
        except TypeError:  # a NULL among them
            size = 64 + 8 * count + sum(len(v) for v in values if v is not None)
        if self._buffered + size > _SYNC_EVERY and self._buffered:
            self.sync()
        self.pgconn.send_query_prepared(
            name, values, param_formats=transformer.formats if count else None
        )
        result = PipelinedResult(self)
        queue.append((result, None))
        self._buffered += size
        if size > _SYNC_EVERY:
            self.sync()  # a write larger than the threshold: its Sync right behind it
        if self._asking is not None:
            self._ask(self._asking)
        return result

    def _head(self, sql: str) -> str | None:
        try:
            return self._heads[sql]
        except KeyError:
            pass
        head = _merge_head(sql)
        if head is not None and self._tables is not None:
            table = _merge_table(sql)
            plain = None if table is None else self._tables.get(table, None)
            if table is not None and plain is None:
                # Sent as one insert (which takes the table's lock: no trigger can be
                # created until the transaction ends), the table asked about behind it.
                self._asking = table
                return None
            if not plain:
                head = None
        self._heads[sql] = head
        return head

    def _ask(self, table: str) -> None:
        """``"auto"``: learn whether ``table`` takes merged inserts (a round trip)."""
        assert self._tables is not None
        self._asking = None
        cursor = self.connection.execute(_PLAIN_TABLE, (table,))
        self.wait_results()  # with a Sync (see sync_not_flush), as every read here
        row = cursor.fetchone()
        self._tables[table] = bool(row is not None and row[0])

    def _add_row(self, key: tuple[str, Any], head: str, values: Any, count: int) -> PipelinedResult:
        """Queue one row of a mergeable insert (sent with its neighbours by :meth:`send_group`)."""
        if self._group_key != key:
            if self.group:
                self.send_group()
            self._group_key, self._group_head = key, head
            self._group_formats = list(self._transformer.formats or ())
        try:
            size = 8 * count + sum(map(len, values))
        except TypeError:  # a NULL among them
            size = 8 * count + sum(len(v) for v in values if v is not None)
        if self._buffered + size > _SYNC_EVERY:
            self.sync()  # sends the group so far, then starts a new one
            self._group_key, self._group_head = key, head
            self._group_formats = list(self._transformer.formats or ())
        result = PipelinedResult(self)
        self.group.append(result)
        self._group_values.extend(values)
        self._buffered += size
        return result

    def send_group(self) -> None:
        """Send the queued rows as merged INSERTs of at most 256 rows (_CHUNKS sizes)."""
        rows, values = self.group, self._group_values
        assert self._group_key is not None
        sql, types = self._group_key
        columns = len(types)
        self.group, self._group_values = [], []
        self._group_key = None
        queue = self.pipeline.result_queue
        start = 0
        while start < len(rows):
            size = next(c for c in _CHUNKS if c <= len(rows) - start and c * columns <= 65535)
            key = (sql, types, size)
            name = self.prepared.get(key)
            if name is None:
                name = self.prepared[key] = b"oncestream_%d" % next(_names)
                self._new.append(key)
                query = _merged_sql(self._group_head, columns, size)
                self.pgconn.send_prepare(name, query, param_types=types * size)
                queue.append((self._ignore, None))
            chunk = values[start * columns : (start + size) * columns]
            self.pgconn.send_query_prepared(name, chunk, param_formats=self._group_formats * size)
            queue.append((_MergedRows(self, rows[start : start + size]), None))
            start += size

    def close(self) -> None:
        """The block ends: send what waits (its Sync comes with psycopg's end of the
        pipeline) and give psycopg its own command queue back."""
        if self.group:
            self.send_group()
        if self.merge:
            self._queue.extend(self.pipeline.command_queue)
            self.pipeline.command_queue = self._queue

    def _formats(self, count: int) -> list[Any]:
        formats = self._auto_formats.get(count)
        if formats is None:
            formats = self._auto_formats[count] = [self._auto] * count
        return formats

    def sync(self) -> None:
        """Send a Sync behind what is buffered (libpq flushes with it) and take in the
        results that arrived, so the server never waits to write them."""
        if not self._buffered:
            return
        if self.group:
            self.send_group()
        self._buffered = 0
        self.pgconn.pipeline_sync()
        self.pipeline.result_queue.append(None)  # psycopg's entry for a Sync
        self.connection.wait(self.pipeline._communicate_gen())

    def wait_results(self) -> None:
        """Send what is buffered and wait for every result queued so far (a round trip)."""
        if self.group:
            self.send_group()
        self._buffered = 0  # psycopg's sync() sends its own Sync behind the writes
        self.pipeline.sync()

    def failed(self, exc: BaseException) -> None:
        """The block failed: forget the statements prepared in it (their Parse may not
        have run), and all of them when the server says one is gone (``DEALLOCATE``)."""
        for key in self._new:
            self.prepared.pop(key, None)
        if getattr(exc, "sqlstate", None) == "26000":  # invalid_sql_statement_name
            self.prepared.clear()
