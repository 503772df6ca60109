"""Transactional ``foreachBatch`` for SQL databases: rows and batch id in one transaction.

Spark replays a micro-batch after a failure (same batch id, same rows when
the source is replayable). Writing the rows and a ``(query, batch_id)`` marker
in the same database transaction makes the write exactly-once: a replay finds
the marker and writes nothing; a crash before the commit leaves neither.

Batch ids are scoped by the streaming query: Spark's query id, which Spark
keeps in the checkpoint (so a restart keeps it and a new checkpoint gets a new
one). Classic Spark hands it to the batch function's thread; Spark Connect does
not (the function runs in a Python process of the server, and the tasks its
DataFrame runs carry no query id), so under Connect the writer reads it from
the checkpoint (``checkpoint_location``), and refuses to run without it rather
than share one scope among queries. ``query_name`` does not enter a streaming
query's scope (renaming a query keeps its batches); it scopes direct calls.

Example::

    from oncestream.spark import transactional

    (df.writeStream
       .foreachBatch(transactional("postgresql://app@db/shop", table="orders",
                                   key_columns=["order_id"],
                                   checkpoint_location="/chk/orders"))
       .option("checkpointLocation", "/chk/orders")
       .start())
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._dsn import Dsn, parse_dsn
from .._errors import ConfigError, LedgerError
from .._private import redacted_repr, scrub
from ..ledger._internal import ledger_from_dsn
from ._batch_claims import claim_batch, claimed_by_another, config_token, second_writer
from ._query_scope import QueryScope, stale_batch_message
from ._table_identity import table_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["BatchWriter", "transactional"]

log = logging.getLogger(__name__)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PG_TYPES = {
    "string": "TEXT",
    "long": "BIGINT",
    "integer": "INTEGER",
    "short": "SMALLINT",
    "byte": "SMALLINT",
    "double": "DOUBLE PRECISION",
    "float": "REAL",
    "boolean": "BOOLEAN",
    "binary": "BYTEA",
    "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
    "date": "DATE",
}
#: The bigint advisory lock key serialising oncestream's PostgreSQL DDL (the ledger's
#: schema takes the same key when it opens).
_PG_DDL_LOCK = 74021
_SQLITE_TYPES = {
    "string": "TEXT",
    "long": "INTEGER",
    "integer": "INTEGER",
    "short": "INTEGER",
    "byte": "INTEGER",
    "double": "REAL",
    "float": "REAL",
    "boolean": "INTEGER",
    "binary": "BLOB",
    "timestamp": "TEXT",
    "timestamp_ntz": "TEXT",
    "date": "TEXT",
}


def _ident(name: str, what: str) -> str:
    if not _IDENT.match(name):
        raise ConfigError(
            f"{what} must be a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*), got {name!r}"
        )
    return name


@dataclass(kw_only=True)
class BatchWriter:
    """The ``(df, batch_id)`` callable :func:`transactional` returns.

    Attributes:
        written: rows inserted by the last call (0 when the batch was skipped).
        skipped: batch ids this writer found already committed.
    """

    dsn: Dsn
    table: str
    key_columns: tuple[str, ...]
    mode: Literal["append", "upsert"]
    scope: QueryScope
    batches_table: str
    create_table: bool
    written: int = 0
    skipped: list[int] | None = None

    def __repr__(self) -> str:
        return redacted_repr(self)

    @property
    def is_postgres(self) -> bool:
        return self.dsn.kind == "postgresql"

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Write ``df`` and mark ``batch_id`` committed, atomically; skip a committed id.

        Raises:
            ConfigError: no query to scope the batch id by, or another writer of this
                query wrote this batch into the table (see :func:`transactional`).
            LedgerError: the database refused the transaction.
        """
        query = self.scope.resolve(df)
        token, run = self._config_token(), self.scope.run(df)
        # A scope other than query_name is a streaming query's id (not a direct call).
        in_query = query != self.scope.query_name
        claim = _Claim(query, batch_id, token, run, in_query)
        arrow = df.toArrow()
        columns = [_ident(c, "column name") for c in arrow.column_names]
        rows = list(zip(*(arrow.column(c).to_pylist() for c in columns), strict=True))
        self.written = self._write(df.schema, columns, rows, claim)
        if self.written < 0:
            self.scope.check_replay(df, batch_id)
            self.skipped = [*(self.skipped or []), batch_id]
            self.written = 0
            log.info("batch %s of %s already committed in %s; skipped", batch_id, query, self.table)
        else:
            log.info(
                "batch %s of %s: %s rows committed to %s", batch_id, query, self.written, self.table
            )
        claim_batch(claim.target, batch_id, token, run)

    def _claim_target(self, tx: Any, query: str) -> tuple[str, ...]:
        """Where ``(query, batch_id)`` is recorded: the batches table, however it is reached.

        Asked on the transaction's own connection (PostgreSQL reports which server,
        database and schema it is); unquoted SQL names ignore case.
        """
        if self.is_postgres:
            database = table_identity(
                "postgresql", self.dsn.url, table=self.batches_table, execute=tx.execute
            )
        else:
            database = table_identity("sqlite", self.dsn, table=self.batches_table)
        return ("transactional", database, self.table.lower(), query)

    def _refuse_second_writer(self, tx: Any, claim: _Claim) -> None:
        """Fail if another writer of this query run wrote this batch into this table.

        Checked inside the transaction, once its connection says which table it is,
        so that nothing of the refused batch is written.
        """
        claim.target = self._claim_target(tx, claim.query)
        batch_id = claim.batch_id
        if claimed_by_another(
            claim.target, batch_id, claim.token, claim.run, in_query=claim.in_query
        ):
            raise _SecondWriter(
                second_writer(
                    f"table {self.table}",
                    batch_id,
                    "write one DataFrame per table per batch (union them), or give each "
                    "writer its own batches_table",
                )
            )

    def _config_token(self) -> str:
        scope = self.scope
        return config_token(
            self.dsn.kind, self.dsn.path, self.dsn.url, self.table, self.key_columns, self.mode,
            self.batches_table, self.create_table, scope.query_name, scope.checkpoint_location,
        )  # fmt: skip

    # -- SQL text, shared by both dialects (both accept ON CONFLICT ... DO UPDATE)

    def _insert_sql(self, columns: list[str], placeholder: str) -> str:
        names = ", ".join(columns)
        marks = ", ".join([placeholder] * len(columns))
        sql = f"INSERT INTO {self.table} ({names}) VALUES ({marks})"
        if self.mode == "upsert":
            keys = ", ".join(self.key_columns)
            updates = [f"{c} = excluded.{c}" for c in columns if c not in self.key_columns]
            action = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
            sql += f" ON CONFLICT ({keys}) {action}"
        return sql

    def _create_sql(self, schema: StructType, types: dict[str, str]) -> str:
        parts = []
        for f in schema.fields:
            type_name = f.dataType.typeName()
            sql_type = types.get(type_name, "NUMERIC" if type_name == "decimal" else "TEXT")
            parts.append(f"{_ident(f.name, 'column name')} {sql_type}")
        if self.key_columns:
            parts.append(f"PRIMARY KEY ({', '.join(self.key_columns)})")
        return f"CREATE TABLE IF NOT EXISTS {self.table} ({', '.join(parts)})"

    def _batches_sql(self, bigint: str, now: str) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.batches_table} (query TEXT NOT NULL, "
            f"batch_id {bigint} NOT NULL, tbl TEXT NOT NULL, rows_written {bigint} NOT NULL, "
            f"committed_at TEXT NOT NULL DEFAULT ({now}), PRIMARY KEY (query, batch_id, tbl))"
        )

    def _create_postgres(self, tx: Any, schema: StructType) -> None:
        """Create the tables that are missing, one transaction at a time.

        Two transactions running ``CREATE TABLE IF NOT EXISTS`` of one new table at
        once both insert its row type, and one fails on ``pg_type_typname_nsp_index``
        (PostgreSQL's known race; two queries starting together into a new table).
        An advisory lock held to commit serialises the creating transactions: the
        second creates after the first committed, and its ``IF NOT EXISTS`` holds.
        The lock is taken only while a table is missing in the schema a CREATE would
        use, so the writes of running queries are never serialised by it.
        """
        names = [self.batches_table, *([self.table] if self.create_table else [])]
        wanted = {n.lower() for n in names}  # plain identifiers fold to lower case
        found = tx.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname = ANY(%s)",
            (sorted(wanted),),
        ).fetchone()[0]
        if found == len(wanted):
            return
        tx.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_DDL_LOCK,))
        tx.execute(self._batches_sql("BIGINT", "now()::text"))
        if self.create_table:
            tx.execute(self._create_sql(schema, _PG_TYPES))

    def _write(
        self,
        schema: StructType,
        columns: list[str],
        rows: list[tuple[Any, ...]],
        claim: _Claim,
    ) -> int:
        """Rows and the batch marker in one ledger transaction; -1 if the batch was committed."""
        postgres = self.is_postgres
        mark = "%s" if postgres else "?"
        ledger = ledger_from_dsn(self.dsn, tables=False)
        query, batch_id = claim.query, claim.batch_id
        stale = ""
        try:
            # SQLite: BEGIN IMMEDIATE takes the write lock before the check, so
            # two replays of one batch cannot both see it uncommitted.
            with ledger, ledger.transaction() as tx:
                self._refuse_second_writer(tx, claim)
                if postgres:
                    self._create_postgres(tx, schema)
                else:
                    tx.execute(self._batches_sql("INTEGER", "CURRENT_TIMESTAMP"))
                    if self.create_table:
                        tx.execute(self._create_sql(schema, _SQLITE_TYPES))
                last = tx.execute(
                    f"SELECT max(batch_id) FROM {self.batches_table} WHERE query = {mark} "
                    f"AND tbl = {mark}",
                    (query, self.table),
                ).fetchone()[0]
                if last is not None and batch_id < last:
                    stale = stale_batch_message(f"table {self.table}", last, query, batch_id)
                # Claiming the id first serialises concurrent replays on its primary key.
                claimed = tx.execute(
                    f"INSERT INTO {self.batches_table} (query, batch_id, tbl, rows_written) "
                    f"VALUES ({mark}, {mark}, {mark}, {mark}) ON CONFLICT DO NOTHING",
                    (query, batch_id, self.table, len(rows)),
                ).rowcount
                if stale:
                    raise _Stale
                if claimed == 0:
                    return -1
                if rows:
                    tx.executemany(
                        self._insert_sql(columns, mark),
                        rows if postgres else [_sqlite_row(r) for r in rows],
                    )
        except _Stale:
            raise ConfigError(stale) from None
        except _SecondWriter as exc:
            raise ConfigError(str(exc)) from None
        except Exception as exc:  # the database refused: name the batch and the table
            text = scrub(str(exc), self.dsn.secrets())
            raise LedgerError(f"writing batch {batch_id} to {self.table}: {text}") from exc
        return len(rows)


class _Stale(Exception):
    """Leaves the transaction (rolled back) for a batch id below the scope's last one."""


class _SecondWriter(Exception):
    """Leaves the transaction (rolled back): another writer of the query wrote this batch."""


@dataclass
class _Claim:
    """One call's claim on ``(table, batch_id)``; :attr:`target` is set in the transaction."""

    query: str
    batch_id: int
    token: str
    run: str | None
    in_query: bool
    target: tuple[str, ...] = ()


def _sqlite_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    if all(v is None or isinstance(v, int | float | str | bytes) for v in row):
        return row
    return tuple(
        v if v is None or isinstance(v, int | float | str | bytes) else str(v) for v in row
    )


def transactional(
    target: str,
    *,
    table: str,
    key_columns: Sequence[str] = (),
    mode: Literal["append", "upsert"] = "append",
    query_name: str | None = None,
    checkpoint_location: str | None = None,
    batches_table: str = "oncestream_batches",
    create_table: bool = True,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing each micro-batch exactly once into ``table``.

    Each call collects the micro-batch to the driver (size it with the
    source's ``maxMessagesPerTrigger``) and, in one transaction, records
    ``(query, batch_id, table)`` in ``batches_table`` and inserts the rows. A
    batch id already recorded is skipped, so Spark's replay of a batch whose
    previous attempt committed writes nothing.

    Args:
        target: a database URL with SQLAlchemy's meaning, as for ledgers:
            ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, a plain
            SQLite file path, or ``postgresql://...`` (psycopg 3).
        table: destination table (created from the DataFrame schema if absent).
        key_columns: primary key of a created table; required for ``upsert``.
        mode: ``append`` inserts; ``upsert`` inserts or updates by ``key_columns``.
        query_name: the scope of calls outside a streaming query. Inside one the
            query id is the scope whatever the name: a restart from the checkpoint
            under another name skips its replayed batch, and a new checkpoint under
            an old name is a new scope.
        checkpoint_location: the query's ``checkpointLocation``; batch ids are
            scoped by the query id Spark keeps there. Needed under Spark Connect,
            where the batch function is not told its query's id; classic Spark
            tells it. Before a recorded batch is skipped, a commit of it in this
            checkpoint (another query's checkpoint given) fails the batch.
        batches_table: where committed batch ids are recorded.
        create_table: create ``table`` and ``batches_table`` if missing.

    Default scope (neither given): Spark's streaming query id, which Spark
    keeps in the checkpoint (a new checkpoint is a new query, whose batch ids
    restart at 0): classic Spark only.

    Raises:
        ConfigError: on a bad target URL, identifier, mode or missing key columns;
            under Spark Connect without ``checkpoint_location`` (at once when this
            process holds a Connect session, else at the first batch); (at write
            time) when another writer, configured otherwise, wrote this batch of
            the same query into ``table`` in this process: one query's writers share
            its scope, so each would skip the other's batches. Write one DataFrame
            per table per query (union them), or give each writer its own
            ``batches_table``.
        LedgerError: (at write time) when the database rejects the transaction.

    Example::

        query = df.writeStream.foreachBatch(transactional("/data/out.db", table="t")).start()
    """
    _ident(table, "table")
    _ident(batches_table, "batches_table")
    keys = tuple(_ident(k, "key column") for k in key_columns)
    if mode not in ("append", "upsert"):
        raise ConfigError(f"mode must be 'append' or 'upsert', got {mode!r}")
    if mode == "upsert" and not keys:
        raise ConfigError("mode='upsert' needs key_columns naming the table's unique key")
    scope = QueryScope(
        owner=f"transactional(table={table!r})",
        query_name=query_name,
        checkpoint_location=checkpoint_location,
    )
    return BatchWriter(
        dsn=parse_dsn(target, "target"),
        table=table,
        key_columns=keys,
        mode=mode,
        scope=scope,
        batches_table=batches_table,
        create_table=create_table,
    )
