"""Exactly-once ``foreachBatch`` into a Delta Lake table, with delta-rs (no JVM, no delta-spark).

Each micro-batch is appended with :func:`deltalake.write_deltalake` and the
commit carries a Delta *application transaction* (``txn`` action: an app id and
a version) of ``(query, batch_id)``. Delta records it in the same atomic commit
as the data files, so a replayed batch (Spark re-runs the last batch whose
commit it did not record) finds its version already in the table and writes
nothing. Delta's own Spark sink keeps its batch ids the same way.

The batch is collected to the driver as Arrow (``df.toArrow()``) and written
from there: docs/lakehouse.md has the measurement behind that choice and sizes
batches with the source's ``maxMessagesPerTrigger``.

Example::

    from oncestream.spark import delta

    (df.writeStream
       .foreachBatch(delta("/lake/orders", partition_by=["day"]))
       .option("checkpointLocation", "/chk/orders")
       .start())
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigError, OncestreamError
from .._private import redacted_repr, scrub, split_url
from ._batch_claims import claim_batch, config_token, release_batch, second_writer, take_batch
from ._query_scope import QueryScope, stale_batch_message
from ._table_identity import location_identity, table_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DeltaBatchWriter", "delta"]

log = logging.getLogger(__name__)

_MODES = ("append", "overwrite")
_SCHEMA_MODES = (None, "merge")
#: The URI schemes delta-rs 1.6 reads tables from (its "Known schemes"), and any
#: ``opendal+<scheme>``: :func:`delta` refuses any other scheme when it is built.
_SCHEMES = frozenset({
    "file", "fs", "memory", "s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl",
    "azdls", "azblob", "hdfs", "viewfs", "webhdfs", "lakefs", "uc", "dbfs", "hf", "oss", "obs",
    "cos", "tos", "b2", "swift", "sftp", "webdav",
})  # fmt: skip
#: Storage option keys whose values are secrets (scrubbed from delta-rs messages).
_SECRET_OPTION = re.compile(r"secret|password|token|sas|key|credential", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class DeltaWriteError(OncestreamError):
    """A micro-batch could not be written to the Delta table."""


@dataclass(kw_only=True)
class DeltaBatchWriter:
    """The ``(df, batch_id)`` callable :func:`delta` returns.

    Attributes:
        written: rows appended by the last call (0 when the batch was skipped).
        skipped: batch ids this writer found already in the table.
    """

    uri: str
    scope: QueryScope
    mode: Literal["append", "overwrite"]
    partition_by: tuple[str, ...]
    schema_mode: Literal["merge"] | None
    storage_options: dict[str, str] | None = field(default=None, repr=False)
    written: int = 0
    skipped: list[int] | None = None

    def __repr__(self) -> str:
        return redacted_repr(self)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Append ``df`` with the application transaction ``(query, batch_id)``; skip a replay.

        Raises:
            ConfigError: nothing names the query (see :class:`QueryScope`), or another
                writer, configured otherwise, wrote this batch of the query into this
                table in this process (each would skip the other's batches).
            DeltaWriteError: the table records a later batch of this query (a new
                checkpoint reusing ``query_name``), or delta-rs failed.
        """
        app_id = self.scope.resolve(df)
        token, run = self._token(), self.scope.run(df)
        in_query = app_id != self.scope.query_name  # a query id: not a direct call
        target = self._target(app_id)
        if not take_batch(target, batch_id, token, run, in_query=in_query):
            raise ConfigError(
                second_writer(
                    f"Delta table {self.uri}",
                    batch_id,
                    "write one DataFrame per table per batch: union them into one delta() writer",
                )
            )
        try:
            self._write_batch(df, app_id, batch_id, token, run)
        except BaseException:
            release_batch(target, batch_id, token, run)
            raise

    def _write_batch(
        self, df: DataFrame, app_id: str, batch_id: int, token: str, run: str | None
    ) -> None:
        recorded = self.committed_version(app_id)
        if recorded is not None and batch_id <= recorded:
            if batch_id < recorded:
                # Spark re-runs only its last uncommitted batch: an older id is another query.
                raise DeltaWriteError(
                    stale_batch_message(f"Delta table {self.uri}", recorded, app_id, batch_id)
                )
            self.scope.check_replay(df, batch_id)
            claim_batch(self._target(app_id), batch_id, token, run)
            self.written = 0
            self.skipped = [*(self.skipped or []), batch_id]
            log.info("batch %s of %s already in %s; skipped", batch_id, app_id, self.uri)
            return
        table = df.toArrow()
        self._write(table, app_id, batch_id)
        # Asked again: a table the write created is known by its inode from now on.
        claim_batch(self._target(app_id), batch_id, token, run)
        self.written = table.num_rows
        log.info(
            "batch %s of %s: %s rows committed to %s", batch_id, app_id, self.written, self.uri
        )

    def _target(self, app_id: str) -> tuple[str, str]:
        """What this writer's batch ids are claimed under: the table, however spelled."""
        return (table_identity("delta", self.uri), app_id)

    def _token(self) -> str:
        scope = self.scope
        return config_token(
            self.uri, self.mode, self.partition_by, self.schema_mode,
            sorted((self.storage_options or {}).items()), scope.query_name,
            scope.checkpoint_location,
        )  # fmt: skip

    def committed_version(self, app_id: str) -> int | None:
        """The last batch id of ``app_id`` in the table (None: none, or no table yet)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(self.uri, storage_options=self.storage_options)
            version = table.transaction_version(app_id)
        except TableNotFoundError:
            return None
        except Exception as exc:  # delta-rs: a file where the table should be, a store down
            raise DeltaWriteError(
                f"reading Delta table {self.uri} (which batches of query {app_id!r} it "
                f"holds): {self._reason(exc)}"
            ) from exc
        return None if version is None else int(version)

    def _reason(self, exc: BaseException) -> str:
        """delta-rs's message, one line, without colour codes or storage option secrets."""
        secrets = [v for k, v in (self.storage_options or {}).items() if _SECRET_OPTION.search(k)]
        text = " ".join(_ANSI.sub("", str(exc)).split())
        return f"{type(exc).__name__}: {scrub(text, secrets)[:1000]}"

    def _write(self, table: Any, app_id: str, batch_id: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        try:
            write_deltalake(
                self.uri,
                table,
                mode=self.mode,
                partition_by=list(self.partition_by) or None,
                schema_mode=self.schema_mode,
                storage_options=self.storage_options,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id=app_id, version=batch_id)]
                ),
            )
        except Exception as exc:
            raise DeltaWriteError(
                f"writing batch {batch_id} of query {app_id!r} to Delta table {self.uri}: "
                f"{self._reason(exc)}"
            ) from exc


def delta(
    uri: str,
    *,
    query_name: str | None = None,
    checkpoint_location: str | None = None,
    mode: Literal["append", "overwrite"] = "append",
    partition_by: Sequence[str] = (),
    schema_mode: Literal["merge"] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing each micro-batch exactly once into a Delta table.

    Each call collects the micro-batch to the driver as Arrow and commits it with
    delta-rs, together with the application transaction ``(query, batch_id)``
    (Delta's ``txn`` action) in the same commit. A batch whose id the table
    already records for the query is skipped, so Spark's replay of a batch whose
    Delta commit went through writes nothing; a crash before the commit leaves
    nothing behind but unreferenced files. Works under classic Spark and Spark
    Connect (there give ``checkpoint_location``), on every
    supported PySpark.

    Args:
        uri: the table: a local path, or an object-store URI (``s3://``, ``gs://``,
            ``az://``, ``abfss://``...) that delta-rs understands. Created on the
            first batch if missing.
        query_name: the Delta app id of calls outside a streaming query. Inside
            one the query id is the app id whatever the name: a restart from the
            checkpoint under another name skips its replayed batch, and a new
            checkpoint under an old name is a new app id.
        checkpoint_location: the query's ``checkpointLocation``; batch ids are
            scoped by the query id Spark keeps there. Needed under Spark Connect,
            where the batch function is not told its query's id; classic Spark
            tells it. Before a recorded batch is skipped, a commit of it in this
            checkpoint (another query's checkpoint given) fails the batch.
        mode: ``append`` adds each batch; ``overwrite`` replaces the table's
            contents with each batch (for ``outputMode("complete")``).
        partition_by: partition columns of a table created by the first batch.
        schema_mode: ``merge`` lets a batch add columns to the table.
        storage_options: delta-rs storage options (credentials, endpoints), passed
            through as given; not shown by ``repr``.

    Raises:
        ConfigError: a bad mode, schema mode or partition column; a URI that is
            not a path, ``file:///absolute/path`` or of a scheme delta-rs reads; deltalake
            is not installed (``pip install 'oncestream[delta]'``); (at write time)
            another writer, configured otherwise, wrote this batch of the same query
            into the table in this process, however either spells the table (a path
            and its ``file://`` URI, a symlink, ``..``: one table): union the
            DataFrames into one writer.
        DeltaWriteError: (at write time) the table holds a later batch of the query,
            or delta-rs failed to read or write it (a file where the table should be,
            a store that still fails after delta-rs's retries), its error chained.

    Example::

        query = df.writeStream.foreachBatch(delta("/lake/orders")).start()
    """
    _check_uri(uri)
    if mode not in _MODES:
        raise ConfigError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    if schema_mode not in _SCHEMA_MODES:
        raise ConfigError(f"schema_mode must be None or 'merge', got {schema_mode!r}")
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    columns = tuple(partition_by)
    for column in columns:
        if not isinstance(column, str) or not column:
            raise ConfigError(f"partition_by must name columns, got {column!r}")
    scope = QueryScope(
        owner=f"delta({uri!r})", query_name=query_name, checkpoint_location=checkpoint_location
    )
    try:
        import deltalake  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "oncestream.spark.delta needs delta-rs: pip install 'oncestream[delta]'"
        ) from exc
    return DeltaBatchWriter(
        uri=uri,
        scope=scope,
        mode=mode,
        partition_by=columns,
        schema_mode=schema_mode,
        storage_options=dict(storage_options) if storage_options else None,
    )


def _check_uri(uri: object) -> None:
    """Refuse what delta-rs cannot read as a table location, before any batch runs.

    Raises:
        ConfigError: not a non-empty string, an unknown scheme, a ``file:`` URI
            naming another host or a relative path.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigError(f"uri must name a Delta table (a path or URI), got {uri!r}")
    parts = split_url(uri)
    if parts is not None and len(parts.scheme) > 1:  # one letter: a Windows drive
        scheme = parts.scheme.lower()
        known = scheme.partition("+")[2] if scheme.startswith("opendal+") else scheme
        if known not in _SCHEMES:
            raise ConfigError(
                f"uri {parts.redacted()!r} has scheme {parts.scheme!r}, which delta-rs does not "
                f"read tables from; give a local path, file:///absolute/path, or one of "
                f"{', '.join(sorted(_SCHEMES - {'file', 'fs'}))} (delta-rs's schemes; "
                "s3://bucket/path, gs://bucket/path, az://container/path...)"
            )
    location_identity(uri)  # a file: URI of another host or a relative path: ConfigError
