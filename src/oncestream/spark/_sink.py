"""The ``jetstream`` sink: ``df.write`` / ``df.writeStream.format("jetstream")``.

Each Spark task publishes its rows through one :class:`~oncestream.Publisher`
(pipelined, every PubAck verified, re-sends with the same msg id) on a
connection cached per Python worker. Message ids are deterministic, so a
re-run task or a replayed micro-batch re-sends the same ids:

1. the ``msg_id`` column when present;
2. else the input lineage ``STREAM:SEQUENCE`` when the rows carry the
   jetstream source's ``stream`` and ``sequence`` columns (one output row per
   input row; fan-out needs a ``msg_id`` column and is refused otherwise);
3. else the row's position: ``scope:batch:partition:row`` (streaming) or
   ``prefix:p<partition>:r<row>:<hash of subject+data>`` (batch writes).

Beyond the stream's duplicate window, the streaming sink records every
committed micro-batch (:mod:`oncestream.spark._commits`): a task of a batch
already committed writes nothing, and a task of a batch whose earlier attempt
died before the commit first reads what that attempt stored (everything after
the previous commit's tail) and does not send those ids again.

These checks need the target stream. Without the ``stream`` option the sink
finds the stream that captures the subjects it writes (the server's
``STREAM.NAMES`` filtered by subject): on the driver for a fixed ``subject``,
else in each task from its first row, and then treats it as if it were given
(every publish expects it; the window is checked against it). Rows whose
subjects no single stream captures are refused with an error naming
``stream``.

With ``ingest=atomic`` a task publishes its rows as atomic batches
(:class:`~oncestream.publish.AtomicPublisher`): a batch whose commit ack is
lost is looked up in the target, not re-sent blindly, so within a task no
re-send depends on the window either.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    StructType,
)

from .._connection import Connection
from .._errors import ConfigError, ErrCode, JetStreamError, OncestreamError, StreamMismatch
from .._headers import check_msg_id, is_clean_msg_id
from .._retry import retrying
from .._sync import run_sync, submit_sync
from ..publish import AckTally, AtomicPublisher, PubAck, Publisher
from ..publish._internal import check_atomic
from ..read import stored_ids
from ..streams import StreamSpec, create_stream_if_missing
from ..streams._internal import overlapping_streams, owning_stream
from ._commits import (
    AttemptMarker,
    CommitRecord,
    CommitStore,
    last_seq,
    tail_of,
)
from ._compat import StreamArrowWriter
from ._connections import get_connection
from ._sink_ids import FanOutCheck, lineage_ids, position_ids
from ._sink_layout import layout_of as _layout
from ._sink_options import SinkOptions, row_digest, writer_scope
from ._sink_options import id_scope as make_id_scope
from ._worker_heap import freeze_imports

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JetStreamBatchWriter", "JetStreamStreamWriter", "SinkCommit"]

log = logging.getLogger(__name__)

_checked: set[tuple[int, Any]] = set()

#: Atomic batches one task keeps awaiting their commit acks, at most (the server
#: stages 50 per stream for all writers; maxInflight / atomicBatchSize below this).
_ATOMIC_INFLIGHT = 4


async def _connection(options: SinkOptions) -> Connection:
    """The process's connection for the sink's connect options (see ``_connections``)."""
    return await get_connection(options.connect)


def _ensure_log_handler() -> None:
    # Python workers have no logging set up; commit summaries should reach the driver log
    # (the sink's lines and its commit records' store's).
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        level = os.environ.get("ONCESTREAM_SINK_LOG", "INFO").upper()
        for logger in (log, logging.getLogger(CommitStore.__module__)):
            logger.addHandler(handler)
            logger.setLevel(level if level in ("DEBUG", "INFO", "WARNING", "ERROR") else "INFO")


async def _create_target(conn: Connection, spec: StreamSpec) -> dict[str, Any]:
    """createStream=true: the target's info, created when missing.

    Raises:
        ConfigError: ``createStreamSubjects`` overlap another stream's subjects,
            naming that stream (the server's 10065 error does not).
    """
    try:
        return await create_stream_if_missing(conn, spec)
    except JetStreamError as exc:
        if exc.err_code != ErrCode.STREAM_SUBJECT_OVERLAP:
            raise
        others = await overlapping_streams(conn, spec.subjects)
    named = " and ".join(f"stream {n!r} captures {', '.join(s)}" for n, s in others.items())
    # Raised without the server's error chained: Spark prints the whole Python traceback
    # inside its own message, and the server's text adds nothing this one lacks.
    raise ConfigError(
        f"option 'createStreamSubjects': cannot create stream {spec.name!r} with subjects "
        f"{', '.join(spec.subjects)}: {named or 'another stream captures them'}, and a "
        f"subject belongs to one stream only (err_code {ErrCode.STREAM_SUBJECT_OVERLAP:d}). "
        f"Write to {', '.join(map(repr, others)) or 'that stream'} (option 'stream', without "
        "createStream) or choose subjects no other stream captures"
    ) from None


def _check_atomic_target(
    conn: Connection, stream: str, info: dict[str, Any], spec: StreamSpec | None
) -> None:
    """ingest=atomic: the target must allow atomic batches, checked before any task runs.

    Raises:
        ConfigError: naming the stream and how to enable them.
    """
    try:
        check_atomic("the jetstream sink's ingest=atomic", stream, info["config"], conn)
    except ConfigError as exc:
        made = spec is not None and not spec.allow_atomic
        hint = " (createStream: add option createStreamAllowAtomic=true)" if made else ""
        raise ConfigError(f"{exc}{hint}, or use ingest=auto") from None


def _read_after(earlier: AttemptMarker, now: AttemptMarker, last: CommitRecord | None) -> int:
    """The target sequence after which an earlier attempt of this task may have stored rows."""
    if earlier.target_created not in (None, now.target_created):
        # The target was re-created since: that attempt's rows went with the old stream,
        # but a later attempt may have written anywhere in the new one.
        return 0
    if earlier.tail_seq is not None:
        return earlier.tail_seq
    return last.tail_seq if last is not None else 0  # an earlier version's marker


def _one_stream_note(found: str | None) -> str:
    """What a user writing to several streams without option ``stream`` is told."""
    where = f" (stream {found!r}, found from the first row's subject)" if found else ""
    return (
        f"Without option 'stream' the jetstream sink writes to the one stream that captures "
        f"its rows' subjects{where}, so that it can check its duplicate window and skip, on a "
        "retry, what an earlier attempt stored. Give option 'stream', and write the subjects "
        "of each other stream with a query of their own"
    )


def _one_target(done: list[SinkCommit], what: str) -> str | None:
    """The one stream the tasks found from their rows (None: none found).

    Raises:
        ConfigError: the tasks found different streams, naming option ``stream``.
    """
    targets = sorted({m.target for m in done if m.target})
    if len(targets) > 1:
        raise ConfigError(
            f"{what}: the jetstream sink wrote to streams {', '.join(map(repr, targets))}, "
            f"found from the rows' subjects; it writes to one stream. {_one_stream_note(None)}"
        )
    return targets[0] if targets else None


# --------------------------------------------------------------------------- messages


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did; the driver sums these in ``commit``."""

    partition: int
    batch_id: int
    scope: str
    query_id: str | None = None
    id_scope: str = ""
    written: int = 0
    duplicates: int = 0
    skipped_existing: int = 0
    skipped_batch: bool = False
    max_seq: int = 0
    streams: list[str] = field(default_factory=list)
    #: The target stream the task wrote to (the option, or the one found for its rows).
    target: str | None = None


_Rows = tuple[list[str], list[bytes], list[Any], list[str]]


@dataclass
class _Columns:
    """The rows of one Arrow batch to one subject, with a msg_id column and no headers.

    Published as columns (:meth:`Publisher.publish_columns`), no Python loop per row.
    """

    subject: str
    datas: pa.Array
    ids: pa.Array
    first_row: int
    where: str

    def lists(self) -> _Rows:
        """The same rows as column lists (each msg id checked)."""
        ids = _checked_ids(self.ids, self.where, self.first_row)
        n = len(ids)
        return [self.subject] * n, self.datas.to_pylist(), [None] * n, ids


def _checked_ids(column: pa.Array, where: str, offset: int) -> list[str]:
    """The ``msg_id`` column's values, each checked clean (a bad one named by its row)."""
    ids: list[str] = column.to_pylist()
    for i, msg_id in enumerate(ids):
        if not is_clean_msg_id(msg_id):
            check_msg_id(msg_id, f"{where}: the msg_id of row {offset + i}")
    return ids


@dataclass
class _TaskState:
    pub: Publisher
    futures: list[asyncio.Future[PubAck]]
    existing: set[str]
    fan_out: FanOutCheck | None  # lineage ids: one output row per input row
    tally: AckTally = field(default_factory=AckTally)  # acks of the bulk path
    atomic: AtomicPublisher | None = None  # ingest=atomic: every row goes through it
    rows: int = 0
    skipped: int = 0

    async def close(self) -> None:
        """Close the task's publishers (a failed task leaves what is unsettled to its retry)."""
        try:
            if self.atomic is not None:
                await self.atomic.close()
        finally:
            await self.pub.close()


# --------------------------------------------------------------------------- writers


class _JetStreamWriter:
    """Shared driver-side validation and executor-side publishing."""

    streaming = False

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigError(
                "the jetstream sink only appends: overwrite / complete output mode is not "
                "supported (use outputMode('append') or 'update')"
            )
        self.options = SinkOptions.from_spark_options(options)
        self.layout = _layout(schema, self.options)
        #: True when ``stream`` was not given and the sink found the target itself.
        self.found_target = False
        if self.options.stream is None and not self.layout.subject and self.options.subject:
            # One subject for every row: its stream is known before any task runs.
            run_sync(self._find_target(self.options.subject))
        if self.options.stream is not None:
            run_sync(self._check_target())

    # -- driver side (and a task's, when the target is found from its rows)

    async def _find_target(self, subject: str) -> None:
        """No ``stream`` option: make the stream that captures ``subject`` the target.

        Raises:
            ConfigError: naming ``stream``, when no stream captures ``subject`` or the
                server does not say which one does.
        """
        conn = await _connection(self.options)
        try:
            stream = await owning_stream(conn, subject)
        except OncestreamError as exc:
            raise ConfigError(
                f"the jetstream sink cannot find the stream that captures subject {subject!r} "
                f"({type(exc).__name__}: {exc}); give option 'stream' (the target stream)"
            ) from None
        if stream is None:
            raise ConfigError(
                f"no stream captures subject {subject!r}, so nothing the jetstream sink "
                "publishes there would be stored: create the stream (or use createStream=true "
                "with option 'stream'), or write to a subject a stream captures"
            )
        publisher = replace(self.options.publisher, stream=stream)
        self.options = replace(self.options, publisher=publisher)
        self.found_target = True

    async def _check_target(self) -> None:
        """Check the target's duplicate window against the retry horizons, once per process."""
        key = (os.getpid(), self.options)
        if key in _checked:
            return
        opts = self.options
        stream = opts.stream or ""
        conn = await _connection(opts)
        spec = opts.create_stream  # createStream=true: created when missing, never changed
        info = await (_create_target(conn, spec) if spec else conn.stream_info(stream))
        atomic = opts.ingest == "atomic"
        if atomic:
            _check_atomic_target(conn, stream, info, spec)
        window = int(info["config"].get("duplicate_window") or 0) / 1e9
        horizon = opts.publisher.retry_horizon
        spark_horizon = horizon * opts.task_max_failures
        if opts.publisher.check_window:  # off with ingest=atomic: no blind re-sends
            try:
                opts.publisher.check_window_fits(stream, window)
            except ConfigError as exc:
                exc.add_note("Spark options: ackTimeout, maxAttempts; checkWindow=false accepts it")
                raise
        if window < spark_horizon and not (atomic and self.streaming):
            _ensure_log_handler()
            relies = (
                "a retried task of a batch write (no commit records) re-sends its atomic "
                "batches, and only the window drops those its failed attempt stored"
                if atomic
                else "Task retries after the window rely on the sink's stored-id check of "
                "the uncommitted tail, not on the window"
            )
            log.warning(
                "stream %r: duplicate_window %gs < Spark task retry horizon %gs "
                "(taskMaxFailures=%d x retry horizon %gs). %s",
                stream,
                window,
                spark_horizon,
                opts.task_max_failures,
                horizon,
                relies,
            )
        if self.streaming and opts.checkpoint:
            # Created here once rather than by racing tasks. The query id is not known
            # on the driver yet, so nothing query-specific is recorded here: each task
            # stores the target's tail in its attempt marker instead.
            await CommitStore(conn, opts.commits_stream).ensure()
        _checked.add(key)

    # -- executor side

    def _write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        freeze_imports()
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        batch_id, query_id = -1, None
        if self.streaming and ctx is not None:
            batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
            query_id = ctx.getLocalProperty("sql.streaming.queryId")
        scope = writer_scope(query_id, self.options.checkpoint)
        commit = SinkCommit(
            partition=partition,
            batch_id=batch_id,
            scope=scope,
            query_id=query_id,
            id_scope=make_id_scope(query_id, self.options.checkpoint),
        )
        try:
            if self.options.stream is None:
                batches = self._target_from_rows(batches)
            commit.target = self.options.stream
            state = run_sync(self._start(commit))
            if state is None:
                for _ in batches:  # already committed: read the input, write nothing
                    pass
                return commit
            # The loop thread publishes batch k while this thread takes batch k+1 from Spark.
            sending: concurrent.futures.Future[None] | None = None
            try:
                for batch in batches:
                    if batch.num_rows:
                        rows = self._rows(batch, commit, state.rows, state.fan_out)
                        state.rows += batch.num_rows
                        if sending is not None:
                            sending.result()
                        sending = submit_sync(self._send(state, rows))
            except Exception:
                if sending is not None:  # let it end before the task fails
                    with contextlib.suppress(Exception):
                        sending.result()
                with contextlib.suppress(Exception):
                    run_sync(state.close())
                raise
            if sending is not None:
                sending.result()
            run_sync(self._finish(state, commit))
        except StreamMismatch as exc:
            if self.found_target:
                exc.add_note(_one_stream_note(self.options.stream))
            raise
        except OncestreamError:
            raise
        except Exception as exc:
            raise OncestreamError(f"jetstream sink task {partition}: {exc}") from exc
        return commit

    def _target_from_rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """No ``stream`` option and a ``subject`` column: the stream of the first row's subject.

        Every later row must go to the same stream: each publish expects it, and the
        server refuses one whose subject another stream captures (StreamMismatch).
        Returns the batches, the ones read to find the first row included.
        """
        seen: list[pa.RecordBatch] = []
        subject = None
        for batch in batches:
            seen.append(batch)
            if batch.num_rows:
                column = batch.column(batch.schema.names.index("subject"))
                subject = next((s for s in column.to_pylist() if s is not None), None)
                subject = subject or self.options.subject
                if subject is not None:
                    break
        if subject is not None:
            run_sync(self._find_target(subject))
            run_sync(self._check_target())
        return itertools.chain(seen, batches)

    async def _start(self, commit: SinkCommit) -> _TaskState | None:
        opts = self.options
        conn = await _connection(opts)
        existing: set[str] = set()
        marking = self.streaming and commit.batch_id >= 0
        last: CommitRecord | None = None
        if marking:
            last = await CommitStore(conn, opts.commits_stream).last(commit.scope, commit.query_id)
            if last is not None and last.batch_id >= commit.batch_id:
                commit.skipped_batch = True
                return None
        # No target only when the task has no rows: its Publisher writes the marker alone.
        pub_options = opts.publisher if opts.stream else replace(opts.publisher, check_window=False)
        pub = Publisher(conn, pub_options)
        try:
            await pub.start()
            if marking:
                # The task's own Publisher also writes its attempt marker.
                store = CommitStore(conn, opts.commits_stream, pub)
                if last is None:
                    await store.ensure()
                # Read before the marker is stored, so before this attempt publishes:
                # whatever any attempt of this batch stores lies after it.
                tail, created = (None, None)
                if opts.stream is not None:
                    tail, created = await tail_of(conn, opts.stream)
                marker = AttemptMarker(
                    batch_id=commit.batch_id,
                    query_id=commit.query_id,
                    tail_seq=tail,
                    target_created=created,
                )
                earlier = await store.mark_attempt(
                    commit.scope, commit.partition, marker, last=last
                )
                if earlier is not None and opts.stream is not None:
                    existing = await stored_ids(
                        conn, opts.stream, _read_after(earlier, marker, last)
                    )
            if opts.ingest == "atomic":
                inflight = opts.publisher.max_inflight // opts.atomic_batch_size
                atomic = AtomicPublisher(
                    conn,
                    opts.publisher,
                    chunk_size=opts.atomic_batch_size,
                    max_inflight=min(max(1, inflight), _ATOMIC_INFLIGHT),
                )
                # Reads the target's last sequence: every batch of this attempt lands after it.
                await atomic.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await pub.close()
            raise
        fan_out = FanOutCheck() if self.layout.lineage else None
        state = _TaskState(pub=pub, futures=[], existing=existing, fan_out=fan_out)
        if opts.ingest == "atomic":
            state.atomic = atomic
        return state

    def _rows(
        self,
        batch: pa.RecordBatch,
        commit: SinkCommit,
        offset: int,
        fan_out: FanOutCheck | None = None,
    ) -> _Rows | _Columns:
        """The rows of one Arrow batch, as columns or column lists; nulls and types checked.

        Message ids (a ``msg_id`` column, lineage, positions in a micro-batch) are an
        Arrow column, so rows to one subject without headers are published as columns.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        layout, opts = self.layout, self.options
        n = batch.num_rows
        col = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
        where = f"partition {commit.partition}, rows {offset}..{offset + n - 1}"
        one_subject = opts.subject
        if layout.subject:
            subject_col = col["subject"]
            if subject_col.null_count and opts.subject is not None:
                subject_col = pc.fill_null(subject_col, opts.subject)
            if subject_col.null_count:
                raise ConfigError(f"{where}: a row has a null subject and no 'subject' option")
            low, high = pc.min_max(subject_col).values()
            one_subject = low.as_py() if low == high else None
        data_col = col["data"]
        if not layout.data_binary:
            data_col = data_col.cast(pa.binary())
        if data_col.null_count:
            data_col = pc.fill_null(data_col, pa.scalar(b"", pa.binary()))
        prefix = opts.id_prefix
        id_col: pa.Array | None = None
        if layout.msg_id:
            if col["msg_id"].null_count:
                raise ConfigError(f"{where}: a row has a null msg_id")
            id_col = col["msg_id"]
        elif layout.lineage:
            streams, seqs = col["stream"], col["sequence"]
            if streams.null_count or seqs.null_count:
                raise ConfigError(f"{where}: a row has a null stream or sequence (lineage id)")
            id_col = lineage_ids(streams, seqs, prefix)
            if fan_out is not None:
                fan_out.check(streams, seqs, id_col)
        elif self.streaming:
            id_col = position_ids(
                prefix, commit.id_scope, commit.batch_id, commit.partition, offset, n
            )
        if (
            id_col is not None
            and one_subject is not None
            and (not layout.headers or col["headers"].null_count == n)
        ):
            return _Columns(one_subject, data_col, id_col, offset, where)
        subjects: list[Any] = subject_col.to_pylist() if layout.subject else [opts.subject] * n
        datas = data_col.to_pylist()
        headers: list[Any] = [None] * n
        if layout.headers and col["headers"].null_count < n:
            headers = [
                {k: v for k, v in h if v is not None} or None if h else None
                for h in col["headers"].to_pylist()
            ]
        if id_col is not None:
            ids = _checked_ids(id_col, where, offset)
        else:
            base = f"{prefix or 'batch'}:p{commit.partition}:r"
            ids = [f"{base}{offset + i}:{row_digest(subjects[i], datas[i])}" for i in range(n)]
        return subjects, datas, headers, ids

    async def _send(self, state: _TaskState, rows: _Rows | _Columns) -> None:
        publish, futures, existing = state.pub.publish, state.futures, state.existing
        expected = self.options.stream
        if isinstance(rows, _Columns):
            if (
                state.atomic is None
                and not existing
                and (expected is None or expected == state.pub.options.stream)
            ):
                # The common case: frames built by pyarrow, no Python loop per row.
                try:
                    await state.pub.publish_columns(
                        rows.subject,
                        rows.datas,
                        rows.ids,
                        tally=state.tally,
                        first_row=rows.first_row,
                    )
                except ConfigError as exc:
                    raise ConfigError(f"{rows.where}: {exc}") from exc
                return
            rows = rows.lists()
        subjects, datas, headers_list, ids = rows
        if state.atomic is not None:
            if existing:  # stored by an earlier attempt of this task (whole batches)
                keep = [i for i, msg_id in enumerate(ids) if msg_id not in existing]
                state.skipped += len(ids) - len(keep)
                subjects = [subjects[i] for i in keep]
                datas = [datas[i] for i in keep]
                headers_list = [headers_list[i] for i in keep]
                ids = [ids[i] for i in keep]
            has_headers = any(headers_list)
            await state.atomic.publish(subjects, datas, ids, headers_list if has_headers else None)
            return
        same_stream = expected is None or expected == state.pub.options.stream
        if not existing and same_stream and not any(headers_list):
            # The common case: one tight loop, no await per row.
            await state.pub.publish_many(subjects, datas, ids, tally=state.tally)
            return
        for subject, data, headers, msg_id in zip(*rows, strict=True):
            if existing and msg_id in existing:
                state.skipped += 1
                continue
            futures.append(
                await publish(
                    subject, data, msg_id=msg_id, headers=headers, expected_stream=expected
                )
            )

    async def _finish(self, state: _TaskState, commit: SinkCommit) -> None:
        pub = state.pub
        try:
            await pub.flush()
            tally = state.tally
            if tally.errors:
                raise tally.errors[0]
            streams: set[str] = set(tally.streams)
            written, duplicates, max_seq = tally.stored, tally.duplicates, tally.max_seq
            expected = self.options.stream
            if state.atomic is not None:
                # Every row carried Nats-Expected-Stream: stored rows are in `expected`.
                stats = await state.atomic.flush()
                written, duplicates, max_seq = stats.stored, stats.duplicates, stats.max_seq
                if written or duplicates:
                    streams.add(expected or "")
            if expected is not None and streams - {expected}:
                raise StreamMismatch(
                    f"PubAck from stream {sorted(streams - {expected})[0]!r}, expected "
                    f"{expected!r}",
                    code=400,
                )
            for future in state.futures:
                ack = future.result()  # raises the publish's typed error
                if expected is not None and ack.stream != expected:
                    raise StreamMismatch(
                        f"PubAck from stream {ack.stream!r}, expected {expected!r}", code=400
                    )
                streams.add(ack.stream)
                if ack.duplicate:
                    duplicates += 1
                else:
                    written += 1
                max_seq = max(max_seq, ack.seq)
        finally:
            await state.close()
        commit.written, commit.duplicates, commit.max_seq = written, duplicates, max_seq
        commit.skipped_existing = state.skipped
        commit.streams = sorted(streams)

    # -- driver side, after all tasks

    @staticmethod
    def _totals(messages: list[WriterCommitMessage | None]) -> dict[str, int]:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        return {
            "tasks": len(done),
            "written": sum(m.written for m in done),
            "duplicates": sum(m.duplicates for m in done),
            "skipped_existing": sum(m.skipped_existing for m in done),
            "skipped_tasks": sum(1 for m in done if m.skipped_batch),
        }


class JetStreamBatchWriter(_JetStreamWriter, DataSourceArrowWriter):
    """``df.write.format("jetstream")``: one Publisher per task, counts logged on commit."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _ensure_log_handler()
        _one_target([m for m in messages if isinstance(m, SinkCommit)], "the batch write")
        log.info("jetstream sink committed a batch write: %s", self._totals(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _ensure_log_handler()
        log.warning("jetstream sink: batch write aborted after %s", self._totals(messages))


class JetStreamStreamWriter(_JetStreamWriter, StreamArrowWriter):
    """``df.writeStream.format("jetstream")``: records each committed micro-batch."""

    streaming = True

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _ensure_log_handler()
        totals = self._totals(messages)
        done = [m for m in messages if isinstance(m, SinkCommit)]
        target = _one_target(done, f"micro-batch {batchId}") or self.options.stream
        if done:
            first = done[0]
            # Spark stops the query when this raises, so a server restarting or a stream
            # electing a leader just now must not fail it: recording is idempotent (the
            # record's msg id), retried like the tasks' publishes.
            run_sync(
                retrying(
                    lambda: self._record(first.scope, batchId, totals, first.query_id, target),
                    budget=self.options.publisher.retry_horizon,
                    what=f"recording committed micro-batch {batchId}",
                    budget_source="the options 'ackTimeout' x 'maxAttempts' (the retry horizon)",
                )
            )
        # else no task ran, so nothing was written: a later batch's record (or, on a
        # replay, the markers) covers everything, and the query id is not known here.
        log.info("jetstream sink committed micro-batch %d: %s", batchId, totals)

    async def _record(
        self,
        scope: str,
        batch_id: int,
        totals: dict[str, int],
        query_id: str | None,
        target: str | None,
    ) -> None:
        opts = self.options
        conn = await _connection(opts)
        store = CommitStore(conn, opts.commits_stream)
        await store.ensure()
        tail = await last_seq(conn, target) if target else 0
        record = CommitRecord(
            batch_id=batch_id,
            tail_seq=tail,
            stream=target or "",
            written=totals["written"],
            duplicates=totals["duplicates"],
            skipped=totals["skipped_existing"],
            query_id=query_id,
        )
        try:
            await store.record(scope, record)
        except JetStreamError:
            raise
        except OncestreamError as exc:
            raise OncestreamError(f"recording committed micro-batch {batch_id}: {exc}") from exc

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _ensure_log_handler()
        log.warning(
            "jetstream sink: micro-batch %d aborted after %s; Spark will replay it, and "
            "the replay will not re-send what was stored",
            batchId,
            self._totals(messages),
        )
