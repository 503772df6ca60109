"""Exactly-once ``foreachBatch`` into an Apache Iceberg table, with pyiceberg (no JVM).

Each micro-batch is committed by pyiceberg as one Iceberg commit that carries,
beside the new snapshot:

- the table property ``oncestream.batch.<query>`` set to the batch id: the
  query's high-water mark. Table properties are part of the table's metadata,
  which every writer carries forward and snapshot expiry never touches, so the
  mark outlives any history retention (Flink's Iceberg sink keeps its
  ``flink.max-committed-checkpoint-id`` in snapshot summaries only and looks
  for it in the retained ancestors);
- two snapshot summary properties, :data:`SUMMARY_QUERY` and
  :data:`SUMMARY_BATCH` (the table's history says which batch of which query
  each snapshot holds);
- a commit requirement that the mark is still what the writer read: the SQL
  catalog validates it against the table's current metadata inside the commit,
  so a concurrent commit of the same batch (a second driver replaying it) fails
  this one, which then reads the mark again and skips. Commits of other
  writers (other queries) are retried by pyiceberg onto the new snapshot.

A batch whose id the mark (or, where the mark is gone, the retained history)
holds for the query is skipped; a commit whose outcome is unknown (the catalog's
database connection dropped) is decided by reading the mark again.

Example::

    from oncestream.spark import iceberg

    (df.writeStream
       .foreachBatch(iceberg("lake.orders", warehouse="/lake"))
       .option("checkpointLocation", "/chk/orders")
       .start())
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigError, OncestreamError
from .._private import redacted_repr, scrub
from ..tables._internal import CatalogSpec, catalog_spec
from ._batch_claims import claim_batch, config_token, release_batch, second_writer, take_batch
from ._query_scope import QueryScope, stale_batch_message
from ._table_identity import table_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "MARK_PREFIX",
    "SUMMARY_BATCH",
    "SUMMARY_QUERY",
    "IcebergBatchWriter",
    "IcebergWriteError",
    "iceberg",
]

log = logging.getLogger(__name__)

#: Table property holding a query's last committed batch id: ``oncestream.batch.<query>``.
MARK_PREFIX = "oncestream.batch."
#: Snapshot summary properties of each batch's snapshot.
SUMMARY_QUERY = "oncestream.query"
SUMMARY_BATCH = "oncestream.batch-id"

_MODES = ("append", "overwrite", "upsert")
#: Rounds of "read the mark, commit" before giving up; pyiceberg retries each round's
#: commit itself (table property commit.retry.num-retries) while only other writers race.
_ROUNDS = 6


def _nothing() -> None:
    return None


class IcebergWriteError(OncestreamError):
    """A micro-batch could not be written to the Iceberg table."""


@dataclass(kw_only=True)
class IcebergBatchWriter:
    """The ``(df, batch_id)`` callable :func:`iceberg` returns.

    Attributes:
        written: rows committed by the last call (0 when the batch was skipped).
        skipped: batch ids this writer found already in the table.
    """

    table: tuple[str, ...]
    catalog: CatalogSpec
    scope: QueryScope
    mode: Literal["append", "overwrite", "upsert"]
    key_columns: tuple[str, ...]
    written: int = 0
    skipped: list[int] | None = None
    #: The open catalog of this process (never pickled: reopened where the writer runs).
    _opened: Any = field(default=None, repr=False, compare=False)
    #: The table's identity, found in this process (never pickled: a path's inode is local).
    _identity: str | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return redacted_repr(self)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_opened": None, "_identity": None}

    @property
    def name(self) -> str:
        """The table's identifier, ``namespace.table``."""
        return ".".join(self.table)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commit ``df`` with ``(query, batch_id)`` in the same Iceberg commit; skip a replay.

        Raises:
            ConfigError: nothing names the query (see :class:`QueryScope`), or another
                writer, configured otherwise, wrote this batch of the query into this
                table in this process (each would skip the other's batches).
            IcebergWriteError: the table records a later batch of this query (a
                checkpoint restored from an older copy), its history was expired
                past what the check needs, or pyiceberg or the catalog failed.
        """
        query = self.scope.resolve(df)
        target, token, run = (*self._table_key(), query), self._token(), self.scope.run(df)
        in_query = query != self.scope.query_name  # a query id: not a direct call
        if not take_batch(target, batch_id, token, run, in_query=in_query):
            raise ConfigError(
                second_writer(
                    f"Iceberg table {self.name}",
                    batch_id,
                    "write one DataFrame per table per batch: union them into one iceberg() writer",
                )
            )
        try:
            rows = _utc_timestamps(df.toArrow())
            self.write_arrow(rows, query, batch_id, lambda: self.scope.check_replay(df, batch_id))
        except BaseException:
            release_batch(target, batch_id, token, run)
            raise
        claim_batch(target, batch_id, token, run)

    def write_arrow(
        self, rows: Any, query: str, batch_id: int, replay_check: Callable[[], None] = _nothing
    ) -> int:
        """Commit the Arrow table ``rows`` as batch ``batch_id`` of ``query``; -1 if recorded.

        What :meth:`__call__` does once it knows the query and has the rows; also
        the entry point of writers that are not Spark queries (tests, tools).
        ``replay_check`` runs before a recorded batch is skipped (and may refuse).

        Raises:
            IcebergWriteError: see :meth:`__call__`.
        """
        catalog = self._catalog()
        key = MARK_PREFIX + query
        for _ in range(_ROUNDS):
            table = self._load(catalog, rows)
            recorded = committed_batch(table, query)
            if recorded is not None and batch_id <= recorded:
                if batch_id < recorded:
                    # Spark re-runs only its last uncommitted batch: an older id is another query.
                    raise IcebergWriteError(
                        stale_batch_message(f"Iceberg table {self.name}", recorded, query, batch_id)
                    )
                replay_check()
                self.written = 0
                self.skipped = [*(self.skipped or []), batch_id]
                log.info("batch %s of %s already in %s; skipped", batch_id, query, self.name)
                return -1
            if recorded is None and batch_id > 0:
                self._check_history(table, query, batch_id)
            try:
                self._commit(table, rows, key, query, batch_id)
            except Exception as exc:
                if _conflict(exc):
                    log.info(
                        "batch %s of %s: commit conflict, reading the mark again", batch_id, query
                    )
                    continue
                if self._landed(catalog, query, batch_id):  # outcome unknown: the mark decides
                    log.warning(
                        "batch %s of %s: commit reported %s, but the table holds the batch",
                        batch_id, query, type(exc).__name__,
                    )  # fmt: skip
                    break
                raise self._error(f"committing batch {batch_id} of query {query!r}", exc) from exc
            break
        else:
            raise IcebergWriteError(
                f"batch {batch_id} of query {query!r}: {_ROUNDS} commits into Iceberg table "
                f"{self.name} in a row conflicted with other commits (pyiceberg retries each "
                "one: raise the table's commit.retry.num-retries for this many writers)"
            )
        self.written = rows.num_rows
        log.info(
            "batch %s of %s: %s rows committed to %s", batch_id, query, self.written, self.name
        )
        return int(self.written)

    # -- the pieces

    def _table_key(self) -> tuple[str, ...]:
        """What the batch ids of this table are claimed under in this process (with the query).

        The table's identity (:func:`._table_identity.table_identity`): its catalog's
        database, whatever the URL's spelling (an SQLite file by inode, PostgreSQL
        by what the server reports), the catalog's name and the table's identifier.
        """
        if self._identity is None:
            name = f"{self.catalog.name}:{self.name}"
            dsn = self.catalog.dsn
            if dsn.kind == "sqlite":
                self._catalog()  # creates the file: identified by its inode from the start
                self._identity = table_identity("iceberg", dsn.path or "", table=name)
            else:
                try:
                    with self._catalog().engine.connect() as conn:
                        where = table_identity(
                            "postgresql", dsn.url, table="iceberg_tables",
                            execute=conn.exec_driver_sql,
                        )  # fmt: skip
                except ConfigError:
                    raise
                except Exception as exc:
                    raise self._error(f"identifying {self.catalog}", exc) from exc
                self._identity = f"iceberg|{where}|{name.lower()}"
        return ("iceberg", self._identity)

    def _token(self) -> str:
        scope = self.scope
        return config_token(
            self.table, self.catalog.identity, self.catalog.warehouse, self.catalog.properties,
            self.mode, self.key_columns, scope.query_name, scope.checkpoint_location,
        )  # fmt: skip

    def _catalog(self) -> Any:
        if self._opened is None:
            try:
                self._opened = self.catalog.load()
            except ConfigError:
                raise
            except Exception as exc:
                raise self._error(f"opening {self.catalog}", exc) from exc
        return self._opened

    def _load(self, catalog: Any, rows: Any) -> Any:
        """The table as the catalog has it now; created from ``rows``' schema if missing."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return catalog.load_table(self.table)
        except NoSuchTableError:
            pass
        except Exception as exc:
            raise self._error(f"loading Iceberg table {self.name}", exc) from exc
        try:
            catalog.create_namespace_if_not_exists(self.table[:-1])
            table = catalog.create_table_if_not_exists(self.table, schema=rows.schema)
        except Exception as exc:
            raise self._error(f"creating Iceberg table {self.name}", exc) from exc
        log.info("created Iceberg table %s in %s", self.name, self.catalog)
        return table

    def _commit(self, table: Any, rows: Any, key: str, query: str, batch_id: int) -> None:
        summary = {SUMMARY_QUERY: query, SUMMARY_BATCH: str(batch_id)}
        tx = table.transaction()
        # Staged first: it is checked against the metadata as read, before the mark moves.
        tx._stage((), (_mark_requirement(key, table.metadata.properties.get(key)),))
        if self.mode == "append":
            tx.append(rows, snapshot_properties=summary)
        elif self.mode == "overwrite":
            tx.overwrite(rows, snapshot_properties=summary)
        else:
            tx.upsert(rows, join_cols=list(self.key_columns), snapshot_properties=summary)
        tx.set_properties({key: str(batch_id)})
        tx.commit_transaction()

    def _landed(self, catalog: Any, query: str, batch_id: int) -> bool:
        try:
            recorded = committed_batch(catalog.load_table(self.table), query)
        except Exception:  # the catalog is still unreachable: the outcome stays unknown
            return False
        return recorded is not None and recorded >= batch_id

    def _check_history(self, table: Any, query: str, batch_id: int) -> None:
        """Refuse to write when the table cannot tell whether an earlier attempt committed.

        The mark is missing (the property was removed, or the table replaced) and the
        history that would hold the query's snapshots was expired: batch ``batch_id``
        may be in the table already.
        """
        oldest = truncated_history(table)
        if oldest is None:
            return
        raise IcebergWriteError(
            f"Iceberg table {self.name} has no {MARK_PREFIX}{query} property and its "
            f"history was expired (snapshots before {oldest} are gone), "
            f"so whether batch {batch_id} of query {query!r} was committed before cannot be "
            f"told. If this query never wrote batch {batch_id} here, record the batch before "
            f"it: ALTER TABLE {self.name} SET TBLPROPERTIES ('{MARK_PREFIX}{query}' = "
            f"'{batch_id - 1}') (or pyiceberg's set_properties), then restart the query"
        )

    def _error(self, what: str, exc: BaseException) -> IcebergWriteError:
        text = scrub(" ".join(str(exc).split()), self.catalog.secrets())[:500]
        return IcebergWriteError(f"{what} ({self.catalog}): {type(exc).__name__}: {text}")


def committed_batch(table: Any, query: str) -> int | None:
    """The last batch of ``query`` the Iceberg ``table`` records, or None.

    The table property (the mark) first; the retained snapshots' summaries too,
    so a mark removed by hand is not taken for "nothing committed" while the
    history still shows the query's batches.
    """
    found: list[int] = []
    mark = table.metadata.properties.get(MARK_PREFIX + query)
    if mark is not None:
        found.append(int(mark))
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is not None and summary[SUMMARY_QUERY] == query:
            value = summary[SUMMARY_BATCH]
            if value is not None:
                found.append(int(value))
    return max(found) if found else None


def truncated_history(table: Any) -> int | None:
    """The oldest retained snapshot if older ones were expired, else None (history complete).

    Expired history shows as a retained snapshot whose parent is gone, or (format
    v2, where each commit's sequence number is one more than the last) an oldest
    snapshot past sequence number 1: pyiceberg's expiry clears the parent of the
    snapshot it keeps.
    """
    snapshots = table.metadata.snapshots
    if not snapshots:
        return None
    ids = {s.snapshot_id for s in snapshots}
    oldest = min(snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    dangling = [s for s in snapshots if s.parent_snapshot_id not in (None, *ids)]
    if dangling or (oldest.sequence_number or 0) > 1:
        return int(min(dangling or [oldest], key=lambda s: s.timestamp_ms).snapshot_id)
    return None


def _conflict(exc: BaseException) -> bool:
    """A commit that did not land because another went first (the mark, or the rows moved)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    return isinstance(exc, CommitFailedException | ValidationException)


_REQUIREMENT: Any = None


def _mark_requirement(key: str, value: str | None) -> Any:
    """A commit requirement: the table property ``key`` still holds ``value`` (None: unset).

    pyiceberg's SQL catalog validates requirements against the table's metadata as
    it is in the catalog when the commit runs. A moved mark fails the commit with
    ``ValidationException`` (which pyiceberg does not retry, unlike the
    ``CommitFailedException`` of a concurrent update: retrying cannot pass, the
    writer must read the mark again) and pyiceberg removes the batch's files.
    """
    global _REQUIREMENT
    if _REQUIREMENT is None:
        from pydantic import Field
        from pyiceberg.exceptions import CommitFailedException, ValidationException
        from pyiceberg.table.update import ValidatableTableRequirement

        class AssertBatchMark(ValidatableTableRequirement):
            type: Literal["oncestream-assert-batch-mark"] = Field(
                default="oncestream-assert-batch-mark"
            )
            key: str
            value: str | None = None

            def validate(self, base_metadata: Any) -> None:  # type: ignore[override]
                if base_metadata is None:
                    raise CommitFailedException("the table is gone")
                found = base_metadata.properties.get(self.key)
                if found != self.value:
                    raise ValidationException(
                        f"{self.key} is {found!r}, not {self.value!r}: another commit "
                        "of this query's batches went first"
                    )

        _REQUIREMENT = AssertBatchMark
    return _REQUIREMENT(key=key, value=value)


def _utc_timestamps(rows: Any) -> Any:
    """``rows`` with zoned timestamp columns in UTC (Iceberg's ``timestamptz``).

    Spark hands over timestamps in the session's time zone; the instant is the
    same, only the zone label changes (no values are converted).
    """
    import pyarrow as pa

    fields = []
    changed = False
    for f in rows.schema:
        if pa.types.is_timestamp(f.type) and f.type.tz not in (None, "UTC"):
            fields.append(f.with_type(pa.timestamp(f.type.unit, tz="UTC")))
            changed = True
        else:
            fields.append(f)
    return rows.cast(pa.schema(fields, metadata=rows.schema.metadata)) if changed else rows


def _identifier(table: object) -> tuple[str, ...]:
    if not isinstance(table, str) or not table.strip():
        raise ConfigError(f"table must name an Iceberg table as 'namespace.table', got {table!r}")
    parts = tuple(table.split("."))
    if len(parts) < 2 or any(not p or p != p.strip() for p in parts):
        raise ConfigError(
            f"table must be 'namespace.table' (dot-separated, no empty part), got {table!r}"
        )
    return parts


def iceberg(
    table: str,
    *,
    catalog: str | Mapping[str, str] | None = None,
    warehouse: str | None = None,
    catalog_name: str = "oncestream",
    query_name: str | None = None,
    checkpoint_location: str | None = None,
    mode: Literal["append", "overwrite", "upsert"] = "append",
    key_columns: Sequence[str] = (),
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing each micro-batch exactly once into an Iceberg table.

    Each call collects the micro-batch to the driver as Arrow and commits it with
    pyiceberg: the new snapshot and the query's batch id (a table property, and
    the snapshot's summary) in one commit. A batch whose id the table already
    records for the query is skipped, so Spark's replay of a batch whose Iceberg
    commit went through writes nothing; a crash before the commit leaves only
    data files no snapshot references. Concurrent writers of one table (other
    queries, other processes) are retried onto each other's snapshots; a second
    commit of the same batch fails and is skipped. Works under classic Spark and
    Spark Connect (there give ``checkpoint_location``), on every supported PySpark.

    Args:
        table: the table's identifier, ``namespace.table``; created from the first
            batch's schema if missing (its namespace too).
        catalog: None: an embedded SQL catalog, an SQLite file ``catalog.db`` in
            ``warehouse``. A database URL: pyiceberg's SQL catalog on that
            database (``sqlite:////abs/catalog.db``, a plain SQLite path, or
            ``postgresql://user@host/db`` for a catalog shared by many writers and
            readers; needs the ``postgres`` extra). A mapping: pyiceberg catalog
            properties (``type`` must be ``sql``; ``uri``, ``warehouse``, FileIO
            credentials...), not shown by ``repr``.
        warehouse: where new tables' files go: a folder or an object-store URI.
        catalog_name: the catalog's name (the SQL catalog keys its rows by it; give
            Spark's Iceberg catalog the same name to read the tables).
        query_name: the scope of calls outside a streaming query. Inside one the
            query id is the scope whatever the name.
        checkpoint_location: the query's ``checkpointLocation``; needed under Spark
            Connect (see :func:`~oncestream.spark.delta`).
        mode: ``append`` adds each batch; ``overwrite`` replaces the table's rows with
            each batch (``outputMode("complete")``); ``upsert`` updates the rows whose
            ``key_columns`` match and inserts the others (a batch must not repeat a key).
        key_columns: the key of ``upsert``.

    Raises:
        ConfigError: a bad table, catalog, warehouse, mode or key; pyiceberg is not
            installed (``pip install 'oncestream[iceberg]'``); (at write time) two
            writers of one query into one table.
        IcebergWriteError: (at write time) see :meth:`IcebergBatchWriter.__call__`.

    Example::

        query = df.writeStream.foreachBatch(iceberg("lake.orders", warehouse="/lake")).start()
    """
    identifier = _identifier(table)
    if mode not in _MODES:
        raise ConfigError(f"mode must be 'append', 'overwrite' or 'upsert', got {mode!r}")
    if isinstance(key_columns, str):
        key_columns = (key_columns,)
    try:
        keys = tuple(key_columns)
    except TypeError:
        raise ConfigError(
            f"key_columns must be a list of column names, got {key_columns!r}"
        ) from None
    for column in keys:
        if not isinstance(column, str) or not column:
            raise ConfigError(f"key_columns must name columns, got {column!r}")
    if len(set(keys)) != len(keys):
        raise ConfigError(f"key_columns must name each column once, got {list(keys)!r}")
    if mode == "upsert" and not keys:
        raise ConfigError("mode='upsert' needs key_columns naming the rows' key")
    if mode != "upsert" and keys:
        raise ConfigError(f"key_columns are the key of mode='upsert'; mode is {mode!r}")
    spec = catalog_spec(catalog, warehouse, catalog_name)
    scope = QueryScope(
        owner=f"iceberg({table!r})", query_name=query_name, checkpoint_location=checkpoint_location
    )
    try:
        import pyiceberg  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "oncestream.spark.iceberg needs pyiceberg: pip install 'oncestream[iceberg]'"
        ) from exc
    return IcebergBatchWriter(
        table=identifier, catalog=spec, scope=scope, mode=mode, key_columns=keys
    )
