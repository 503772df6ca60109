"""The read side of the ``jetstream`` data source: batch and Structured Streaming readers.

Offsets are ``{stream: last_sequence_read}`` plus each stream's creation time
(:mod:`oncestream.spark._offsets`, so a stream deleted and re-created under the
same name is noticed); they live in Spark's checkpoint, nothing is acked and no
durable consumer exists. A micro-batch ``(start, end]`` is split into sequence
ranges that executors read with
:class:`~oncestream.spark._reader.PartitionReader`; the stream is an immutable
log, so reading a range again yields the same rows (see docs/spark-source.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .._connection import Connection
from .._errors import ConfigError, DataLossError
from .._sync import run_sync
from ..read._internal import count_sequences, nth_sequence
from ._compat import (
    ADMISSION_CONTROL,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SeenOffset,
    SupportsTriggerAvailableNow,
    read_limit_options,
    refuse_read_limits,
)
from ._offsets import RECREATED_FIX, created_of, make_offset, recreated_text, split_offset
from ._planning import (
    JetStreamPartition,
    first_last,
    plan_partitions,
    resolve_end,
    resolve_start,
    share,
    stream_filters,
    stream_infos,
)
from ._reader import PartitionReader, check_retention, source_connection
from ._source_options import RETRY_BUDGET, SourceOptions
from ._worker_heap import freeze_imports

__all__ = [
    "SCHEMA",
    "JetStreamBatchReader",
    "JetStreamPartition",
    "JetStreamStreamReader",
]

log = logging.getLogger(__name__)

SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("subject", StringType()),
        StructField("sequence", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("msg_id", StringType()),
        StructField("headers", MapType(StringType(), ArrayType(StringType()))),
        StructField("data", BinaryType()),
    ]
)


def _read(options: SourceOptions, partition: JetStreamPartition) -> Iterator[pa.RecordBatch]:
    """Executor side: yield the partition's rows as Arrow record batches."""
    if partition.first > partition.last:
        return
    freeze_imports()

    async def open_reader() -> PartitionReader:
        conn = await source_connection(options.connect)
        first = await check_retention(
            conn,
            partition.stream,
            partition.first,
            partition.last,
            fail_on_data_loss=options.fail_on_data_loss,
            retry_timeout=options.retry_timeout,
            created=partition.created,
        )
        return PartitionReader(
            conn,
            partition.stream,
            first,
            partition.last,
            partition.subjects,
            direct=partition.direct,
            include_headers=options.include_headers,
            batch=options.fetch_batch,
            retry_timeout=options.retry_timeout,
            replicated=partition.replicated,
        )

    reader = run_sync(open_reader())
    try:
        while (batch := run_sync(reader.next_batch())) is not None:
            yield batch
    finally:
        run_sync(reader.close())


class JetStreamBatchReader(DataSourceReader):
    """``spark.read.format("jetstream")``: one snapshot of the streams' ranges.

    Args:
        options: Spark's string options (validated here, in the driver).
        schema: the output schema (always :data:`SCHEMA`).

    Raises:
        ConfigError: on invalid options.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = SourceOptions.from_spark_options(options)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve starting/ending offsets against the streams and split the ranges."""

        async def plan() -> list[JetStreamPartition]:
            conn = await source_connection(self.options.connect)
            infos = await stream_infos(conn, self.options)
            start = await resolve_start(conn, self.options, infos, streaming=False)
            end = await resolve_end(conn, self.options, infos)
            return await plan_partitions(conn, self.options, infos, start, end)

        planned = run_sync(plan())
        # Spark needs at least one partition; an empty range reads nothing.
        return planned or [JetStreamPartition(self.options.streams[0], 1, 0, True)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition (on an executor)."""
        assert isinstance(partition, JetStreamPartition)
        return _read(self.options, partition)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("jetstream")`` with admission control.

    Offsets are ``{stream: last_sequence_read}`` with the streams' creation
    times under ``"stream.created"`` (a re-created stream fails the query, or
    with ``failOnDataLoss=false`` is read again from its beginning).
    ``maxMessagesPerTrigger`` bounds each micro-batch in messages (exactly, also
    under subject filters and interior deletes); ``maxBytesPerTrigger`` is
    converted to messages with the streams' average message size (see
    docs/spark-source.md). ``minOffsetsPerTrigger`` skips a trigger (its end
    offset is its start) until that many new messages exist or
    ``maxTriggerDelay`` passed since the last batch, as Kafka's source does;
    ``Trigger.AvailableNow`` reads everything regardless of the minimum.

    Args:
        options: Spark's string options (validated here, in the driver).
        schema: the output schema (always :data:`SCHEMA`).

    Raises:
        ConfigError: on invalid options.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = SourceOptions.from_spark_options(options)
        if self.options.ending or self.options.ending_timestamp is not None:
            raise ConfigError(
                "options 'endingOffsets' and 'endingTimestamp' apply to batch reads "
                "(spark.read) only, as in Kafka; a streaming query reads what arrives until "
                "it is stopped (Trigger.AvailableNow stops at the streams' heads)"
            )
        refuse_read_limits(read_limit_options(options))  # a user schema skips schema()
        self.schema = schema
        self._available_now: dict[str, int] | None = None
        self._last_trigger: float | None = None  # monotonic time of the last batch (min rows)
        self._unverified: set[str] = set()  # streams warned about: offset without created
        self._seen = SeenOffset()  # PySpark < 4.2: where the next batch starts

    # -- helpers (driver) ----------------------------------------------------------

    def _infos(self) -> tuple[Connection, dict[str, dict[str, Any]]]:
        async def fetch() -> tuple[Connection, dict[str, dict[str, Any]]]:
            conn = await source_connection(self.options.connect)
            return conn, await stream_infos(conn, self.options)

        return run_sync(fetch())

    def _start_of(
        self, start: dict[str, Any], conn: Connection, infos: dict[str, Any]
    ) -> dict[str, int]:
        """``start`` with streams missing from it (added to option 'stream' later) resolved."""
        out = {s: int(v) for s, v in start.items() if s in infos}
        missing = {s: i for s, i in infos.items() if s not in out}
        if missing:
            out.update(run_sync(resolve_start(conn, self.options, missing, streaming=True)))
        return out

    # -- DataSourceStreamReader ----------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: startingOffsets / startingTimestamp (default latest)."""
        conn, infos = self._infos()
        offset = make_offset(
            run_sync(resolve_start(conn, self.options, infos, streaming=True)), infos
        )
        self._seen.saw(offset)
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMinRows`` / ``ReadMaxRows`` / ``ReadMaxBytes`` from the options, else all.

        PySpark has no composite read limit, so with ``minOffsetsPerTrigger`` the
        limit is ``ReadMinRows`` and :meth:`latestOffset` applies the maximum
        options itself (as it does ``maxTriggerDelay``, which ``ReadMinRows``
        cannot carry).
        """
        if self.options.min_messages_per_trigger is not None:
            return ReadMinRows(self.options.min_messages_per_trigger)
        if self.options.max_messages_per_trigger is not None:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the streams' current heads as the target of a Trigger.AvailableNow run."""
        _, infos = self._infos()
        self._available_now = {s: first_last(i)[1] for s, i in infos.items()}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end offset of the next micro-batch, honouring ``limit``.

        PySpark 4.2+ passes ``start`` and ``limit``; 4.0/4.1 pass neither: the batch
        starts where Spark last told this reader (:mod:`._compat`) and reads all
        that is available.
        """
        conn, infos = self._infos()
        if start is None or limit is None:  # PySpark < 4.2 (read limits refused there)
            start, limit = self._seen.offset, ReadAllAvailable()
            if start is None:  # a new query's first batch, or an AvailableNow run
                return make_offset({s: first_last(i)[1] for s, i in infos.items()}, infos)
        return make_offset(self._end_positions(start, limit, conn, infos), infos)

    def _end_positions(
        self, start: dict[str, Any], limit: ReadLimit, conn: Connection, infos: dict[str, Any]
    ) -> dict[str, int]:
        positions, created = split_offset(start)
        begin = self._start_of(positions, conn, infos)
        reset = self._check_reset(begin, positions, created, infos)
        if reset:
            return {s: reset.get(s, begin[s]) for s in infos}
        heads: dict[str, int] = {}
        avail: dict[str, int] = {}
        for stream, info in infos.items():
            first_seq, head = first_last(info)
            if self._available_now is not None:
                head = min(head, self._available_now.get(stream, head))
            heads[stream] = head
            # Sequences lost to retention are not counted against the budget: the
            # batch skips them (failOnDataLoss=false) or fails on them (true).
            effective = max(begin[stream], first_seq - 1)
            avail[stream] = max(0, head - effective)
        if isinstance(limit, ReadMinRows) and self._delay_batch(
            limit.min_rows, conn, infos, begin, avail
        ):
            return {s: begin[s] for s in infos}
        budget = self._budget(limit, infos)
        if budget is None or sum(avail.values()) <= budget:
            return {s: max(heads[s], begin[s]) for s in infos}
        shares = share(avail, budget)
        out: dict[str, int] = {}
        for stream, info in infos.items():
            first_seq = first_last(info)[0]
            effective = max(begin[stream], first_seq - 1)
            if not shares[stream]:
                out[stream] = begin[stream]
            elif self.options.subjects or int(info["state"].get("num_deleted", 0)):
                out[stream] = self._end_by_messages(conn, stream, info, effective, shares[stream])
                out[stream] = min(out[stream], heads[stream])
            else:
                out[stream] = effective + shares[stream]
        return out

    def _delay_batch(
        self,
        min_rows: int,
        conn: Connection,
        infos: dict[str, Any],
        begin: dict[str, int],
        avail: dict[str, int],
    ) -> bool:
        """Whether to skip this trigger for ``minOffsetsPerTrigger`` (Kafka's ``delayBatch``).

        A trigger runs when ``maxTriggerDelay`` passed since the last one that ran
        (always the first after a start, as in Kafka) or when at least
        ``min_rows`` new messages exist; either restarts the delay. Messages are
        counted like ``maxMessagesPerTrigger`` counts them: exactly, also under
        subject filters and interior deletes. ``Trigger.AvailableNow`` never
        waits: its end is fixed, and a skipped trigger would end the query early.
        """
        if self._available_now is not None:
            return False
        now = time.monotonic()
        if self._last_trigger is None or now - self._last_trigger >= self.options.trigger_delay:
            self._last_trigger = now
            return False
        if self._new_messages(min_rows, conn, infos, begin, avail) < min_rows:
            return True
        self._last_trigger = now
        return False

    def _new_messages(
        self,
        at_most: int,
        conn: Connection,
        infos: dict[str, Any],
        begin: dict[str, int],
        avail: dict[str, int],
    ) -> int:
        """The new messages after ``begin`` in all streams, counted up to ``at_most``."""
        total = sum(avail.values())
        exact = self.options.subjects or any(
            int(i["state"].get("num_deleted", 0)) for i in infos.values()
        )
        if total < at_most or not exact:
            return total  # sequences bound messages from above: fewer is fewer
        counted = 0
        for stream, info in infos.items():
            if not avail[stream] or counted >= at_most:
                continue
            filters = stream_filters(self.options.subjects, info) if self.options.subjects else ()
            if self.options.subjects and not filters:
                continue
            first_seq, head = first_last(info)
            counted += run_sync(
                count_sequences(
                    conn,
                    stream,
                    max(begin[stream], first_seq - 1),
                    head,
                    at_most - counted,
                    filters,
                    retry_timeout=self.options.retry_timeout,
                    budget_source=RETRY_BUDGET,
                )
            )
        return counted

    def _end_by_messages(
        self, conn: Connection, stream: str, info: dict[str, Any], after: int, count: int
    ) -> int:
        """The end offset after which exactly ``count`` matching messages are read.

        Sequences and messages differ under subject filters and interior deletes,
        so the ``count``-th matching message is looked up on the server.
        """
        filters = stream_filters(self.options.subjects, info) if self.options.subjects else ()
        last_seq = first_last(info)[1]
        if self.options.subjects and not filters:
            return last_seq  # no filter can match this stream: skip to its head
        seq, exhausted = run_sync(
            nth_sequence(
                conn,
                stream,
                after,
                count,
                filters,
                retry_timeout=self.options.retry_timeout,
                budget_source=RETRY_BUDGET,
            )
        )
        return last_seq if exhausted or seq is None else seq

    def _check_reset(
        self,
        begin: dict[str, int],
        positions: dict[str, int],
        created: dict[str, str],
        infos: dict[str, dict[str, Any]],
    ) -> dict[str, int]:
        """Streams whose checkpointed position belongs to a stream that is gone (re-created).

        The offset's creation time of each stream is compared with the stream's
        current one. An offset without it (written before oncestream recorded it)
        is accepted with a warning, and only a position past the stream's end
        shows a re-creation then.

        Returns the positions to restart them from (their new beginning) when
        ``failOnDataLoss=false``.

        Raises:
            DataLossError: when ``failOnDataLoss=true``.
        """
        reset: dict[str, int] = {}
        for stream, info in infos.items():
            first_seq, last_seq = first_last(info)
            recorded, current = created.get(stream), created_of(info)
            if recorded is not None and current is not None and recorded != current:
                text = recreated_text(stream, begin[stream], recorded, info)
                fix = RECREATED_FIX
            elif begin[stream] > last_seq:
                why = "was it deleted and recreated?" if recorded is None else "restored from "
                if recorded is not None:
                    why += "an older snapshot? its creation time is the checkpoint's"
                text = (
                    f"stream {stream!r}: the checkpoint has read up to sequence {begin[stream]} "
                    f"but the stream ends at {last_seq} ({why})"
                )
                fix = "set option failOnDataLoss=false to restart it from its beginning"
            else:
                if recorded is None and stream in positions and stream not in self._unverified:
                    self._unverified.add(stream)
                    log.warning(
                        "stream %r: the checkpointed offset has no creation time (written by "
                        "an earlier oncestream), so a re-creation of the stream before this "
                        "restart cannot be noticed unless its position is past the stream's "
                        "end; taking the stream created %s as the one the checkpoint read "
                        "(the next offset records it)",
                        stream,
                        current,
                    )
                continue
            if self.options.fail_on_data_loss:
                raise DataLossError(f"{text}; {fix}")
            log.warning("%s; restarting it from its beginning (failOnDataLoss=false)", text)
            reset[stream] = max(first_seq, 1) - 1
        return reset

    def _budget(self, limit: ReadLimit, infos: dict[str, dict[str, Any]]) -> int | None:
        if isinstance(limit, ReadAllAvailable):
            return None
        budgets: list[int] = []
        max_rows = self.options.max_messages_per_trigger
        max_bytes = self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        if max_rows is not None:
            budgets.append(max_rows)
        if max_bytes is not None:
            messages = sum(int(i["state"].get("messages", 0)) for i in infos.values())
            size = sum(int(i["state"].get("bytes", 0)) for i in infos.values())
            average = size / messages if messages else 1.0
            budgets.append(max(1, int(max_bytes // max(average, 1.0))))
        return min(budgets) if budgets else None

    def reportLatestOffset(self) -> dict[str, int]:
        """The streams' heads, so query progress shows how far behind the query is."""
        _, infos = self._infos()
        return {s: first_last(i)[1] for s, i in infos.items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Split ``(start, end]`` per stream into sequence ranges (checking retention).

        The ranges are checked against the streams' creation times in ``end``: a
        batch planned before its stream was re-created (and replayed after a
        restart) does not read the new stream at the old positions.
        """
        if not ADMISSION_CONTROL:
            self._seen.saw(end)
        first, first_created = split_offset(start)
        last, last_created = split_offset(end)

        async def plan() -> list[JetStreamPartition]:
            conn = await source_connection(self.options.connect)
            infos = await stream_infos(conn, self.options)
            begin = {s: first.get(s, last.get(s, 0)) for s in infos}
            finish = {s: last.get(s, begin[s]) for s in infos}
            for s, info in infos.items():
                recorded = first_created.get(s, last_created.get(s))
                if recorded == last_created.get(s):
                    continue
                # The batch that restarts a re-created stream. latestOffset's reset ends it at
                # the new stream's beginning (empty); only an AvailableNow run on PySpark < 4.2,
                # whose end Spark fixed before this reader knew the start, ends past it.
                begin[s] = min(max(first_last(info)[0], 1) - 1, finish[s])
                if begin[s] < finish[s] and self.options.fail_on_data_loss:
                    text = recreated_text(s, first.get(s, 0), str(recorded), info)
                    raise DataLossError(f"{text}; {RECREATED_FIX}")
            created = {s: c for s in infos if (c := last_created.get(s))}
            return await plan_partitions(conn, self.options, infos, begin, finish, created)

        return run_sync(plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition (on an executor)."""
        assert isinstance(partition, JetStreamPartition)
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: positions live in Spark's checkpoint, nothing is acked."""

    def stop(self) -> None:
        """Nothing to release: the per-process connection is reused by later queries."""
