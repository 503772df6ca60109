"""Pipelined, exactly-once JetStream publishing.

A :class:`Publisher` sends every message with a deterministic ``Nats-Msg-Id``
and returns a future for its PubAck without waiting for it. Unacknowledged
messages are re-sent with the same msg id (after an ack timeout or a
reconnect) until ``max_attempts`` is exhausted, so within the stream's
``duplicate_window`` a retry can never store a message twice; ``start()``
checks that the retry horizon fits inside that window.

Example::

    async with Publisher(conn, PublisherOptions(stream="ORDERS")) as pub:
        for order in orders:
            await pub.publish(f"orders.{order.region}", order.raw, msg_id=order.id)
        await pub.flush()
    print(pub.stats)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import orjson

from .._connection import Connection
from .._errors import (
    ConfigError,
    ErrCode,
    JetStreamError,
    OperationTimeout,
    PermissionDenied,
    PublishError,
    jetstream_error,
)
from .._headers import EXPECTED_STREAM, check_msg_id
from .._nats import FrameSubscription, exception_retrieved, status_code
from .._options import parse_duration
from .._retry import retrying
from ..streams._internal import check_server_bugs, server_version
from ..tracing._internal import tracer
from ._columns import check_columns, frames
from ._fast_ingest import (
    LINGER,
    BatchTable,
    Counted,
    FastBatch,
    choose_ingest,
    fast_template,
    op_of,
    rereply,
)
from ._frames import (
    AckTally,
    HeaderValues,
    Pending,
    check_single_values,
    check_subject,
    conditional_headers,
    id_only_frame,
    late_duplicate,
    too_large,
    too_many_inflight,
)
from ._options import KeyFunction, PubAck, PublisherOptions, PublisherStats, warn_unchecked_window
from ._retry import RetryTable

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AckTally", "KeyFunction", "PubAck", "Publisher", "PublisherOptions", "PublisherStats"]

log = logging.getLogger(__name__)

# Write to the socket once this much is queued, even before the loop yields.
WRITE_BATCH_BYTES = 64 * 1024
# One HPUB frame: subject, reply inbox + token, header length, total length, headers, data.
_HPUB = b"HPUB %b %b%d %d %d\r\n%b%b\r\n"
_FI_HPUB = fast_template(_HPUB)
_START, _APPEND = op_of(1), op_of(2)
_new_object = object.__new__
_Future = asyncio.Future
# Deadlines use the clock of asyncio's default loop, without the method call.
_monotonic = time.monotonic


class Publisher:
    """Publishes to JetStream with pipelined acks, deterministic msg ids and retries.

    Args:
        conn: an open :class:`Connection` (not closed by the Publisher).
        options: pipelining and retry settings.
        key_fn: ``key_fn(subject, data, headers) -> str`` computes the msg id
            when ``publish()`` gets none (e.g. a hash of a record key).

    See the module docstring for an example.
    """

    def __init__(
        self,
        conn: Connection,
        options: PublisherOptions | None = None,
        *,
        key_fn: KeyFunction | None = None,
    ) -> None:
        self.conn = conn
        self.options = options or PublisherOptions()
        self._key_fn = key_fn
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._sub: FrameSubscription | None = None
        self._inbox = b""
        self._inbox_len = 0
        self._token = 0
        lanes = _Lanes(self)
        self._table = RetryTable(conn, self.options, lanes)
        # The reply hot path reads the table's dicts directly.
        self._pending = self._table.pending
        self._waiting = self._table.waiting
        self._late = self._table.late
        self._inflight = 0
        self._max_inflight = self.options.max_inflight
        self._wake_at = max(0, self._max_inflight - max(1, self._max_inflight // 8))
        self._permit_waiters: list[asyncio.Future[None]] = []
        self._idle = asyncio.Event()
        self._idle.set()
        self._out: list[bytes] = []
        self._out_size = 0
        self._write_scheduled = False
        self._subjects: dict[str, bytes] = {}
        self._failures: list[asyncio.Future[PubAck]] = []
        self._ticker: asyncio.Task[None] | None = None
        self._sent = self._acked = self._duplicates = self._failed = 0
        self._multi_values = True
        self._max_payload = 0
        self._ack_timeout = self.options.ack_timeout
        self.duplicate_window: float | None = None
        # With a target stream, every publish carries Nats-Expected-Stream: the
        # server refuses (StreamMismatch) one whose subject another stream captures.
        self._expect = self.options.stream
        self._fast_hpub, self._fast_len = id_only_frame(self._expect)
        # Once a fast batch's first message (with Nats-Expected-Stream) is confirmed
        # stored, its later messages leave the header out (FastBatch.go_bare): one that
        # reaches another stream names a batch that stream never saw, and is refused
        # (err 10208) unstored. That saves the server a header check and 25-40 bytes per
        # message (~6% more msg/s); every re-send on the ack path carries it again.
        bare, bare_len = id_only_frame(None)
        templates = (fast_template(self._fast_hpub), fast_template(bare), self._fast_len - bare_len)
        self._expect_line = b""
        if self._expect is not None:
            self._expect_line = b"%b: %b\r\n" % (EXPECTED_STREAM.encode(), self._expect.encode())
        #: "fast" (first attempts in fast-ingest batches) or "acks", chosen in start().
        self.ingest = "acks"
        self._fast = BatchTable(b"", self._ack_timeout, lanes, stream=self._expect)
        self._fast.templates = templates
        self._linger: asyncio.TimerHandle | None = None
        self._linger_sent = 0
        self._tracer = tracer(self.options.tracing, "publisher")
        #: Called with the seconds from a message's last send to its PubAck
        #: (oncestream.metrics sets it; None costs one check per ack).
        self.ack_observer: Callable[[float], None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, retry_budget: float | None = None) -> None:
        """Check the stream (window guard) and subscribe to the reply inbox.

        A transient failure of the stream lookup (a leader election, a paused
        server) is retried for ``retry_budget`` seconds.

        Args:
            retry_budget: seconds to retry the lookup (0: one attempt, for a caller
                that retries the whole start itself); None: the options'
                :attr:`~PublisherOptions.patience`.

        Raises:
            StreamNotFound: ``options.stream`` does not exist.
            OperationTimeout: the stream lookup failed transiently for that long.
            ConfigError: the retry horizon exceeds the stream's duplicate window, or
                ``retry_budget`` is not a duration.
            PermissionDenied: the user may not subscribe to the reply inbox (no
                PubAck could arrive).
        """
        opts = self.options
        budget = (
            opts.patience if retry_budget is None else parse_duration("retry_budget", retry_budget)
        )
        if self._started:
            return
        if self._closed:
            raise PublishError("this Publisher is closed")
        config: dict[str, object] = {}
        if opts.stream is not None:
            if not budget:  # the caller retries the whole start (and notes it)
                info = await self.conn.stream_info(opts.stream)
            else:
                info = await retrying(
                    lambda: self.conn.stream_info(opts.stream or ""),
                    budget=budget,
                    what=f"STREAM.INFO {opts.stream}",
                    budget_source=(
                        "PublisherOptions ack_timeout x max_attempts"
                        if retry_budget is None
                        else "the caller's retry budget"
                    ),
                )
            config = info.get("config", {})
            window = int(config.get("duplicate_window") or 0) / 1e9  # type: ignore[call-overload]
            self.duplicate_window = window
            if opts.check_window:
                opts.check_window_fits(opts.stream, window)
        elif opts.check_window:
            warn_unchecked_window(opts.retry_horizon)
        conn = self.conn
        replicas = int(str(config.get("num_replicas") or 1)) if opts.stream else None
        check_server_bugs(conn, "publish", replicas=replicas)
        self.ingest, why = choose_ingest(opts.ingest, opts.stream, config, server_version(conn))
        if opts.ingest == "fast" and self.ingest != "fast":
            raise ConfigError(
                f"ingest='fast' needs fast-ingest batches, but {why}: enable them with "
                f"`oncestream stream edit {opts.stream or 'STREAM'} --allow-batched` "
                "(nats-server 2.14+), or use ingest='auto'"
            )
        _log_ingest_once(opts.stream, self.ingest, why)
        self._loop = asyncio.get_running_loop()
        self._max_payload = conn.max_payload
        inbox = conn.new_inbox() + "."
        self._inbox = inbox.encode()
        self._inbox_len = len(self._inbox)
        # Replies bypass nats-py's Msg objects where the adapter can (see _nats). Fast
        # batches reply to <inbox>F.<batch id>.<flow>.ok.<seq>.<op>.$FI, hence ">".
        wildcard = inbox + (">" if self.ingest == "fast" else "*")
        self._sub = await conn.subscribe_frames(wildcard, self._on_reply)
        # The server must know the reply subscription before the first ack; it
        # reports a refused subscription before it answers the flush's PING.
        try:
            await conn.flush()
        except BaseException:  # a caller retrying start() subscribes anew: drop this one
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
            raise
        denial = conn.subscription_denial(wildcard)
        if denial is not None:
            await self._sub.unsubscribe()
            self._sub = None
            raise PermissionDenied(
                f"the Publisher cannot receive PubAcks: the server refused the subscription to "
                f"its reply inbox {wildcard} ({denial}); the user needs permission to subscribe "
                "to _INBOX.>"
            )
        self._multi_values = conn.multi_value_headers
        conn.on_reconnect(self._on_reconnect)
        conn.on_permission_denied(self._on_denied)
        self._fast.inbox = self._inbox
        self._ticker = asyncio.create_task(self._table.run(), name="oncestream-publisher-ticker")
        self._started = True

    async def close(self) -> None:
        """Flush, then stop the ticker and unsubscribe (the connection stays open).

        Raises:
            PublishError: (or a JetStreamError) as :meth:`flush` does.
        """
        if self._closed:
            return
        try:
            if self._started:
                await self.flush()
        finally:
            self._closed = True
            self._started = False
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            if self._ticker is not None:
                self._ticker.cancel()
                try:
                    await self._ticker
                except asyncio.CancelledError:
                    pass
                self._ticker = None
            # A long-lived connection outlives many Publishers (one per Spark task).
            self.conn.remove_reconnect_listener(self._on_reconnect)
            self.conn.remove_permission_listener(self._on_denied)
            if self._sub is not None:
                await self._sub.unsubscribe()
                self._sub = None
            self._abandon(PublishError("the Publisher was closed before the PubAck arrived"))

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.close()
            return
        try:
            await self.close()
        except (PublishError, JetStreamError) as close_exc:
            log.warning("publisher close after an error: %s", close_exc)

    # ------------------------------------------------------------------ publishing

    @property
    def stats(self) -> PublisherStats:
        """A snapshot of the counters."""
        return PublisherStats(
            sent=self._sent,
            acked=self._acked,
            duplicates=self._duplicates,
            retried=self._table.retried,
            failed=self._failed,
        )

    @property
    def started(self) -> bool:
        """Whether :meth:`start` succeeded."""
        return self._started

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def inflight(self) -> int:
        """Publishes whose PubAck is still outstanding."""
        return self._inflight

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str | None = None,
        headers: HeaderValues | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
    ) -> asyncio.Future[PubAck]:
        """Send one message and return the future of its :class:`PubAck`.

        Returns as soon as the message is queued for the socket; await the
        future (or :meth:`flush`) for the ack.

        Raises:
            ConfigError: no ``msg_id`` and no ``key_fn``; an invalid subject or header.
            MessageTooLarge: headers + data exceed the server's max_payload.
            TooManyInflight: fail-fast mode and ``max_inflight`` acks outstanding.
            PublishError: the Publisher is closed.

        The future fails with :class:`PublishFailed` after ``max_attempts`` sends
        unacknowledged or without a stream leader, :class:`StreamNotFound` when no stream
        captures ``subject``, or the typed :class:`JetStreamError` the server answered.
        With ``options.stream`` set, ``expected_stream`` defaults to it, so a
        subject captured by another stream fails with :class:`StreamMismatch`.
        """
        if not self._started:
            await self.start()
        if msg_id is None:
            if self._key_fn is None:
                raise ConfigError(
                    f"publish to {subject!r} without msg_id: exactly-once needs a deterministic "
                    "msg id per message (pass msg_id= or configure key_fn)"
                )
            msg_id = self._key_fn(subject, data, headers)
        if type(msg_id) is not str or not (
            msg_id.isprintable() and msg_id and msg_id[0] != " " and msg_id[-1] != " "
        ):
            check_msg_id(msg_id)  # is_clean_msg_id inlined above; this names the reason
        subject_bytes = self._subjects.get(subject)
        if subject_bytes is None:
            subject_bytes = self._check_subject(subject)
        span = None
        if self._tracer is not None:
            headers, span = self._tracer.start_publish(subject, msg_id, headers)
        if expected_stream is None:
            expected_stream = self._expect
        if (
            headers is None
            and expected_stream == self._expect
            and expected_last_seq is None
            and expected_last_subject_seq is None
            and expected_last_msg_id is None
        ):
            id_bytes = msg_id.encode()
            hdr = None
            hdr_len = self._fast_len + len(id_bytes)
        else:
            if headers and not self._multi_values:
                check_single_values(headers)
            hdr = conditional_headers(
                msg_id,
                headers,
                expected_stream=expected_stream,
                expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq,
                expected_last_msg_id=expected_last_msg_id,
            )
            hdr_len = len(hdr)
        size = hdr_len + len(data)
        if size > self._max_payload:
            raise too_large(msg_id, subject, size, self._max_payload)
        if (
            self.ingest == "fast"
            and expected_stream == self._expect
            and expected_last_seq is None
            and expected_last_subject_seq is None
            and expected_last_msg_id is None
        ):
            batch = self._fast.open
            if (
                batch is not None
                and batch.seq < batch.window_end
                and self._inflight < self._max_inflight
            ):
                if self._inflight == 0:
                    self._idle.clear()
                self._inflight += 1
            else:
                batch = await self._fast_slot(subject_bytes)
            if batch is not None:
                batch.seq = seq = batch.seq + 1
                op = _APPEND if seq > 1 else _START
                if hdr is None:
                    shrink = batch.shrink
                    cmd = batch.template % (
                        subject_bytes,
                        batch.prefix,
                        seq,
                        op,
                        hdr_len - shrink,
                        size - shrink,
                        id_bytes,
                        data,
                    )
                else:
                    cmd = _FI_HPUB % (
                        subject_bytes,
                        batch.prefix,
                        seq,
                        op,
                        hdr_len,
                        size,
                        hdr,
                        data,
                    )
                future: asyncio.Future[PubAck] = _Future(loop=self._loop)
                batch.entries[seq] = Pending(
                    cmd, future, msg_id, subject, _monotonic() + self._ack_timeout
                )
                self._sent += 1
                self._queue_fast(cmd)
                if span is not None:
                    future.add_done_callback(self._tracer.ack_callback(span))  # type: ignore[union-attr]
                return future
        if self._inflight >= self._max_inflight:
            if not self.options.backpressure:
                raise too_many_inflight(self._inflight, self._max_inflight)
            await self._wait_permit()
        if self._closed:
            raise PublishError("this Publisher is closed")
        if self._inflight == 0:
            self._idle.clear()
        self._inflight += 1
        self._token = token = self._token + 1
        if hdr is None:
            cmd = self._fast_hpub % (
                subject_bytes,
                self._inbox,
                token,
                hdr_len,
                size,
                id_bytes,
                data,
            )
        else:
            cmd = _HPUB % (subject_bytes, self._inbox, token, hdr_len, size, hdr, data)
        future = _Future(loop=self._loop)
        self._pending[token] = Pending(
            cmd, future, msg_id, subject, _monotonic() + self._ack_timeout
        )
        self._sent += 1
        self._out.append(cmd)
        self._out_size += len(cmd)
        if self._out_size >= WRITE_BATCH_BYTES:
            self._write_out()
        elif not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)  # type: ignore[union-attr]
        if span is not None:
            future.add_done_callback(self._tracer.ack_callback(span))  # type: ignore[union-attr]
        return future

    async def publish_many(
        self,
        subjects: Sequence[str],
        datas: Sequence[bytes],
        msg_ids: Sequence[str],
        *,
        tally: AckTally | None = None,
    ) -> list[asyncio.Future[PubAck]]:
        """:meth:`publish` of many msg-id-only messages in one loop; futures in input order.

        Awaits only when the window is full; raises as :meth:`publish` (the
        futures before a failing message stay valid). With ``tally``, the acks
        are counted there and no futures are returned (the cheapest path; a
        failed publish is in ``tally.errors`` and raised by :meth:`flush`).
        """
        if not self._started:
            await self.start()
        if not (len(subjects) == len(datas) == len(msg_ids)):
            raise ConfigError(
                f"publish_many: {len(subjects)} subjects, {len(datas)} data and "
                f"{len(msg_ids)} msg ids (one each per message)"
            )
        if self._tracer is not None:
            return await self._publish_each(subjects, datas, msg_ids, tally)
        if self.ingest == "fast":
            return await self._publish_many_fast(subjects, datas, msg_ids, tally)
        return await self._publish_many_acks(subjects, datas, msg_ids, tally)

    async def _publish_many_acks(
        self,
        subjects: Sequence[str],
        datas: Sequence[bytes],
        msg_ids: Sequence[str],
        tally: AckTally | None,
    ) -> list[asyncio.Future[PubAck]]:
        """publish_many on the pipelined-ack path."""
        futures: list[asyncio.Future[PubAck]] = []
        append_future = futures.append
        sent = 0
        cache = self._subjects
        template, fixed = self._fast_hpub, self._fast_len
        inbox, pending, out = self._inbox, self._pending, self._out
        loop, max_payload, timeout = self._loop, self._max_payload, self._ack_timeout
        max_inflight = self._max_inflight
        try:
            for subject, data, msg_id in zip(subjects, datas, msg_ids, strict=True):
                if type(msg_id) is not str or not (
                    msg_id.isprintable() and msg_id and msg_id[0] != " " and msg_id[-1] != " "
                ):
                    check_msg_id(msg_id)  # is_clean_msg_id inlined; this names the reason
                subject_bytes = cache.get(subject)
                if subject_bytes is None:
                    subject_bytes = self._check_subject(subject)
                id_bytes = msg_id.encode()
                hdr_len = fixed + len(id_bytes)
                size = hdr_len + len(data)
                if size > max_payload:
                    raise too_large(msg_id, subject, size, max_payload)
                if self._inflight >= max_inflight:
                    if not self.options.backpressure:
                        raise too_many_inflight(self._inflight, max_inflight)
                    await self._wait_permit()
                    out = self._out  # _write_out swapped the list
                    max_payload = self._max_payload
                if self._closed:
                    raise PublishError("this Publisher is closed")
                if self._inflight == 0:
                    self._idle.clear()
                self._inflight += 1
                sent += 1
                self._token = token = self._token + 1
                cmd = template % (subject_bytes, inbox, token, hdr_len, size, id_bytes, data)
                if tally is None:
                    future: asyncio.Future[PubAck] = _Future(loop=loop)
                    pending[token] = Pending(cmd, future, msg_id, subject, _monotonic() + timeout)
                    append_future(future)
                else:
                    pending[token] = Pending(cmd, tally, msg_id, subject, _monotonic() + timeout)
                out.append(cmd)
                self._out_size += len(cmd)
                if self._out_size >= WRITE_BATCH_BYTES:
                    self._write_out()
                    out = self._out
        finally:
            self._sent += sent
            if self._out and not self._write_scheduled:
                self._write_scheduled = True
                loop.call_soon(self._write_out)  # type: ignore[union-attr]
        return futures

    async def _publish_many_fast(
        self,
        subjects: Sequence[str],
        datas: Sequence[bytes],
        msg_ids: Sequence[str],
        tally: AckTally | None,
    ) -> list[asyncio.Future[PubAck]]:
        """publish_many into fast-ingest batches (first attempts; see _fast_ingest)."""
        futures: list[asyncio.Future[PubAck]] = []
        append_future = futures.append
        sent = 0
        cache = self._subjects
        fixed = self._fast_len
        loop, max_payload, timeout = self._loop, self._max_payload, self._ack_timeout
        max_inflight = self._max_inflight
        batch = self._fast.open
        out = self._out
        try:
            for index, (subject, data, msg_id) in enumerate(
                zip(subjects, datas, msg_ids, strict=True)
            ):
                if type(msg_id) is not str or not (
                    msg_id.isprintable() and msg_id and msg_id[0] != " " and msg_id[-1] != " "
                ):
                    check_msg_id(msg_id)  # is_clean_msg_id inlined; this names the reason
                subject_bytes = cache.get(subject)
                if subject_bytes is None:
                    subject_bytes = self._check_subject(subject)
                id_bytes = msg_id.encode()
                hdr_len = fixed + len(id_bytes)
                size = hdr_len + len(data)
                if size > max_payload:
                    raise too_large(msg_id, subject, size, max_payload)
                if (
                    batch is None
                    or batch is not self._fast.open
                    or batch.seq >= batch.window_end
                    or self._inflight >= max_inflight
                ):
                    batch = await self._fast_slot(subject_bytes)
                    out = self._out  # _write_out swapped the list
                    max_payload = self._max_payload
                    if batch is None:  # batches turned off, or paused after a reconnect
                        self._sent += sent
                        sent = 0
                        rest = await self._publish_many_acks(
                            subjects[index:], datas[index:], msg_ids[index:], tally
                        )
                        return futures + rest
                else:
                    if self._inflight == 0:
                        self._idle.clear()
                    self._inflight += 1
                if tally is not None and tally not in batch.tallies:
                    batch.tallies.append(tally)
                sent += 1
                batch.seq = seq = batch.seq + 1
                shrink = batch.shrink
                cmd = batch.template % (
                    subject_bytes,
                    batch.prefix,
                    seq,
                    _APPEND if seq > 1 else _START,
                    hdr_len - shrink,
                    size - shrink,
                    id_bytes,
                    data,
                )
                if tally is None:
                    future: asyncio.Future[PubAck] = _Future(loop=loop)
                    batch.entries[seq] = Pending(
                        cmd, future, msg_id, subject, _monotonic() + timeout
                    )
                    append_future(future)
                else:
                    batch.entries[seq] = Pending(
                        cmd, tally, msg_id, subject, _monotonic() + timeout
                    )
                out.append(cmd)
                self._out_size += len(cmd)
                if self._out_size >= WRITE_BATCH_BYTES:
                    self._write_out()
                    out = self._out
        finally:
            self._end_fast_run(sent)
        return futures

    async def publish_columns(
        self,
        subject: str,
        datas: pa.Array,
        msg_ids: pa.Array,
        *,
        tally: AckTally,
        first_row: int = 0,
    ) -> None:
        """:meth:`publish_many` of Arrow columns to one subject, counted in ``tally``.

        The same guarantees and checks as :meth:`publish_many`; on the
        fast-ingest path the frames are built by pyarrow a chunk at a time
        (about a third of the per-message loop's cost), elsewhere this is
        ``publish_many`` of the columns' values. Needs pyarrow.

        Args:
            subject: every message's subject.
            datas: binary (or string) payloads; msg_ids: string ids; same length, no nulls.
            tally: counts the acks; a failed publish is in ``tally.errors`` and
                raised by :meth:`flush`.
            first_row: the number errors give the first row (say, its position in a file).

        Raises:
            ConfigError: a null, an unclean msg id (naming the row), an invalid subject.
            MessageTooLarge: a message above the server's max_payload.

        Example::

            tally = AckTally()
            await pub.publish_columns("orders.eu", table["data"], table["id"], tally=tally)
            await pub.flush()
        """
        if not self._started:
            await self.start()
        columns = check_columns(
            datas,
            msg_ids,
            fixed=self._fast_len,
            max_payload=self._max_payload,
            subject=subject,
            first_row=first_row,
        )
        subject_bytes = self._subjects.get(subject) or self._check_subject(subject)
        if self._tracer is not None or self.ingest != "fast":
            await self.publish_many(
                [subject] * len(columns),
                columns.datas.to_pylist(),
                msg_ids.to_pylist(),
                tally=tally,
            )
            return
        total, start, sent = len(columns), 0, 0
        try:
            while start < total:
                batch = await self._fast_slot(subject_bytes)  # one message counted in flight
                if batch is None:  # batches turned off, or paused after a reconnect
                    self._sent += sent
                    sent = 0
                    await self._publish_many_acks(
                        [subject] * (total - start),
                        columns.datas.slice(start).to_pylist(),
                        msg_ids.slice(start).to_pylist(),
                        tally,
                    )
                    return
                try:
                    if columns.max_size > self._max_payload:  # a reconnect lowered it
                        raise columns.too_large(self._max_payload, msg_ids, subject)
                    count = columns.rows_within(
                        min(
                            total - start,
                            batch.window_end - batch.seq,
                            self._max_inflight - self._inflight + 1,
                        )
                    )
                    first = batch.seq + 1
                    chunk = frames(
                        batch.template,
                        batch.shrink,
                        subject=subject_bytes,
                        prefix=batch.prefix,
                        first_seq=first,
                        columns=columns,
                        start=start,
                        count=count,
                    )
                except BaseException:
                    self._release()  # the message _fast_slot counted in flight
                    raise
                # No await from _fast_slot to here: the run's sequences are this chunk's alone.
                self._inflight += count - 1
                batch.seq += count
                batch.add_frames(first, chunk, tally, _monotonic() + self._ack_timeout)
                if tally not in batch.tallies:
                    batch.tallies.append(tally)
                sent += count
                start += count
                self._out.extend(chunk)
                self._out_size += sum(map(len, chunk))
                if self._out_size >= WRITE_BATCH_BYTES:
                    self._write_out()
        finally:
            self._end_fast_run(sent)

    async def _publish_each(
        self,
        subjects: Sequence[str],
        datas: Sequence[bytes],
        msg_ids: Sequence[str],
        tally: AckTally | None,
    ) -> list[asyncio.Future[PubAck]]:
        """publish_many with tracing: one span and one traceparent per message."""
        futures = []
        for subject, data, msg_id in zip(subjects, datas, msg_ids, strict=True):
            future = await self.publish(subject, data, msg_id=msg_id)
            if tally is None:
                futures.append(future)
            else:
                future.add_done_callback(_tally_callback(tally))
        return futures

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every pending publish is acknowledged or has failed.

        Raises:
            OperationTimeout: acks still outstanding after ``timeout`` seconds.
            PublishError: (``PublishFailed``) or the typed :class:`JetStreamError`
                of the first failure since the previous flush whose future nobody
                retrieved; a note gives the number of such failures.
        """
        if self._fast.open is not None:
            self._fast.end(self._fast.open)
        self._write_out()
        if self._inflight:
            try:
                async with asyncio.timeout(timeout):
                    await self._idle.wait()
            except TimeoutError:
                raise OperationTimeout(
                    f"flush: {self._inflight} publishes still unacknowledged after {timeout}s"
                ) from None
        # Let tasks awaiting the failed futures run first, so they own their errors.
        await asyncio.sleep(0)
        failures, self._failures = self._failures, []
        unclaimed: list[BaseException] = []
        for future in failures:
            claimed = exception_retrieved(future)
            exc = future.exception() if not future.cancelled() else None
            if exc is not None and not claimed:
                unclaimed.append(exc)
        if unclaimed:
            first = unclaimed[0]
            if len(unclaimed) > 1:
                first.add_note(f"{len(unclaimed)} publishes failed since the previous flush")
            raise first

    # ------------------------------------------------------------------ internals

    def _check_subject(self, subject: str) -> bytes:
        encoded = check_subject(subject)
        if len(self._subjects) < 10_000:
            self._subjects[subject] = encoded
        return encoded

    async def _wait_permit(self) -> None:
        loop = self._loop
        assert loop is not None
        while self._inflight >= self._max_inflight and not self._closed:
            # The queued bytes must reach the server, or no ack will free a permit.
            self._write_out()
            waiter: asyncio.Future[None] = loop.create_future()
            self._permit_waiters.append(waiter)
            await waiter

    def _write_out(self) -> None:
        self._write_scheduled = False
        if not self._out:
            return
        out, self._out, self._out_size = self._out, [], 0
        try:
            # Dropped while disconnected: the reconnect handler re-sends everything pending.
            self.conn.write_now(out)
        except Exception as exc:
            log.debug("publisher write failed (will retry after reconnect): %s", exc)

    def _release(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()
        if self._permit_waiters and self._inflight <= self._wake_at:
            waiters, self._permit_waiters = self._permit_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _on_reply(
        self, subject: bytes, _reply: bytes, data: bytes | bytearray, headers: bytes | None
    ) -> None:
        try:
            token = int(subject[self._inbox_len :])
        except ValueError:
            if self._fast.batches:
                status = status_code(headers) if headers is not None else None
                self._fast.reply(bytes(subject[self._inbox_len + 2 :]), data, status)
            return
        entry = self._pending.pop(token, None)
        if entry is None:
            entry = self._waiting.pop(token, None)
            if entry is None:
                if token in self._late and b"duplicate" in data and late_duplicate(data):
                    self._duplicates += 1
                return
        if headers is not None and status_code(headers) == b"503":
            self._table.no_responders(token, entry)
            return
        try:
            response = orjson.loads(data)
            error = response.get("error")
            if error is None:
                future = entry.future
                duplicate = response.get("duplicate", False)
                if isinstance(future, AckTally):  # publish_many(tally=): counted, no PubAck
                    future.add(response["stream"], response["seq"], duplicate)
                else:
                    # The same instance the frozen __init__ builds, at a third of the
                    # cost of its four object.__setattr__ calls (one ack per message).
                    ack = _new_object(PubAck)
                    fields = ack.__dict__
                    fields["stream"] = response["stream"]
                    fields["seq"] = response["seq"]
                    fields["duplicate"] = duplicate
                    fields["domain"] = response.get("domain")
        except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError):
            self._fail(entry, JetStreamError(f"malformed PubAck for {entry.msg_id!r}: {data!r}"))
            return
        if error is not None:
            exc = jetstream_error(error)
            if exc.err_code == ErrCode.DUPLICATE_MESSAGE_CONFLICT:
                self._table.in_process(token, entry)
                return
            if entry.attempts > 1:
                # Expectations are checked before msg-id de-duplication: a re-sent
                # conditional publish whose original was stored fails this way.
                exc.add_note(
                    f"msg id {entry.msg_id!r} was sent {entry.attempts} times; an earlier "
                    "attempt may have been stored (the server checks Nats-Expected-* headers "
                    "before de-duplicating)"
                )
            self._fail(entry, exc)
            return
        self._acked += 1
        if duplicate:
            self._duplicates += 1
        if self.ack_observer is not None:
            self.ack_observer(max(_monotonic() - entry.deadline + self._ack_timeout, 0.0))
        if entry.attempts > 1:
            self._table.remember_late(token)
        if not isinstance(future, AckTally) and not future.done():
            future.set_result(ack)
        self._release()

    def _fail(self, entry: Pending, exc: BaseException) -> None:
        self._failed += 1
        future = entry.future
        if isinstance(future, AckTally):
            future.errors.append(exc)
            future = _Future(loop=self._loop)  # nobody awaits it: flush() raises it
        if not future.done():
            future.set_exception(exc)
            self._failures.append(future)
        self._release()

    def _on_denied(self, kind: str, subject: str, text: str) -> None:
        """The server refused a publish (no PubAck will come): fail that subject's publishes now."""
        if kind != "publish":
            return
        doomed: list[Pending] = []
        for table in (self._pending, self._waiting):
            for token in [t for t, e in table.items() if e.subject.lower() == subject]:
                doomed.append(table.pop(token))
        for batch in self._fast.batches.values():
            doomed.extend(batch.take_subject(subject))
        for entry in doomed:
            self._fail(entry, PermissionDenied(f"publish to {entry.subject!r} refused: {text}"))
        # A fast batch missing a refused message never completes on the server (its
        # sequence has a gap the server waits on): its other messages go to the ack
        # path, and so does everything this Publisher sends from now on.
        for batch in list(self._fast.batches.values()):
            self._fast.drop(batch)
        self._fast.paused_until = math.inf

    async def _on_reconnect(self) -> None:
        if self._closed or not self._started:
            return
        self._max_payload = self.conn.max_payload
        # The batches' unconfirmed messages join the ack path's re-send, in send order
        # (the server may still hold those batches: they end by its inactivity timeout).
        self._fast.drop_all()
        self._table.resend_all()

    def _enqueue(self, cmd: bytes) -> None:
        self._out.append(cmd)
        self._out_size += len(cmd)

    def _abandon(self, exc: PublishError) -> None:
        self._fast.fail_all(exc)
        self._table.abandon(exc)
        for waiter in self._permit_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._permit_waiters = []

    # ------------------------------------------------------------------ fast-ingest batches

    async def _fast_slot(self, subject: bytes) -> FastBatch | None:
        """The open batch once it may take one more message (counted in flight).

        Opens a batch when none is open; waits while its flow window or
        ``max_inflight`` is full. None when batches were turned off meanwhile
        (the server refused them): the caller uses the ack path.
        """
        while True:
            if self._closed:
                raise PublishError("this Publisher is closed")
            if self.ingest != "fast":
                return None
            batch = self._fast.open
            if batch is None:
                batch = self._fast.new(subject)
                if batch is None:
                    return None  # the server stopped answering batches: ack path for now
            if batch.seq < batch.window_end and self._inflight < self._max_inflight:
                if self._inflight == 0:
                    self._idle.clear()
                self._inflight += 1
                return batch
            if self._inflight >= self._max_inflight and not self.options.backpressure:
                raise too_many_inflight(self._inflight, self._max_inflight)
            # The queued frames must reach the server, or no flow ack will come.
            self._write_out()
            waiter: asyncio.Future[None] = self._loop.create_future()  # type: ignore[union-attr]
            self._permit_waiters.append(waiter)
            await waiter

    def _queue_fast(self, cmd: bytes) -> None:
        self._out.append(cmd)
        self._out_size += len(cmd)
        if self._out_size >= WRITE_BATCH_BYTES:
            self._write_out()
        elif not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)  # type: ignore[union-attr]
        if self._linger is None:
            self._arm_linger()

    def _end_fast_run(self, sent: int) -> None:
        """After a bulk loop into fast batches: count it, write the rest soon, arm the linger."""
        self._sent += sent
        if self._out and not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)  # type: ignore[union-attr]
        if sent and self._linger is None:
            self._arm_linger()

    def _arm_linger(self) -> None:
        self._linger_sent = self._sent
        self._linger = self._loop.call_later(LINGER, self._on_linger)  # type: ignore[union-attr]

    def _on_linger(self) -> None:
        """End the open batch once nothing was published for LINGER (its tail is then acked)."""
        self._linger = None
        batch = self._fast.open
        if batch is None or self._closed:
            return
        if self._sent != self._linger_sent or (self._permit_waiters and batch.window_sent()):
            self._arm_linger()  # still publishing, or the window sent: its flow ack will come
            return
        self._fast.end(batch)  # within a window no flow ack may come: the end's PubAck confirms

    def _fast_tick(self) -> None:
        self._fast.tick(stalled=bool(self._permit_waiters))

    def _send_now(self, frame: bytes) -> None:
        self._enqueue(frame)
        self._write_out()

    def _refuse_batches(self, exc: JetStreamError) -> None:
        if self.ingest == "fast":
            self.ingest = "acks"
            log.warning(
                "publisher to stream %r: fast-ingest batches refused (%s, err_code %d); "
                "using pipelined acks from now on",
                self._expect,
                exc,
                exc.err_code,
            )

    def _wake_all(self) -> None:
        waiters, self._permit_waiters = self._permit_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _to_acks(self, entries: list[Pending], *, send: bool = True) -> None:
        """Re-send ``entries`` as their next attempt on the pipelined-ack path."""
        if not entries:
            return
        inbox, table, expect = self._inbox, self._table, self._expect_line
        for entry in entries:
            self._token = token = self._token + 1
            entry.cmd = rereply(entry.cmd, inbox + b"%d" % token, expect)
            table.adopt(token, entry, send=send)
        if send:
            log.debug("publisher re-sent %d messages a fast batch did not confirm", len(entries))
            self._write_out()

    def _confirm(self, batch: FastBatch, entries: list[Pending], counted: list[Counted]) -> None:
        """Resolve entries (and runs of frames) a flow ack or the batch's PubAck confirmed."""
        if not entries and not counted:
            return
        if counted:
            self._confirm_counted(counted)
        if entries:
            self._confirm_entries(batch, entries)
        if self._inflight == 0:
            self._idle.set()
        if self._permit_waiters:
            self._wake_all()

    def _confirm_entries(self, batch: FastBatch, entries: list[Pending]) -> None:
        """Resolve Pendings as stored: their futures get the batch's PubAck, tallies count."""
        ack = _new_object(PubAck)
        fields = ack.__dict__
        fields["stream"] = stream = self._expect or ""
        fields["seq"] = 0
        fields["duplicate"] = False
        fields["domain"] = None
        fields["batch"] = batch.id.decode()
        observer = self.ack_observer
        now = _monotonic() + self._ack_timeout
        tally: AckTally | None = None
        run = 0
        for entry in entries:
            future = entry.future
            if type(future) is AckTally:  # publish_many(tally=): count runs, not messages
                if future is not tally:
                    if tally is not None:
                        tally.add_batched(stream, run)
                    tally, run = future, 0
                run += 1
            elif not future.done():  # type: ignore[union-attr]
                future.set_result(ack)  # type: ignore[union-attr]
            if observer is not None:
                observer(max(now - entry.deadline, 0.0))
        if tally is not None:
            tally.add_batched(stream, run)
        count = len(entries)
        self._acked += count
        self._inflight -= count

    def _confirm_counted(self, counted: list[Counted]) -> None:
        """Count runs of frames (publish_columns) confirmed as stored in their tallies."""
        stream = self._expect or ""
        observer = self.ack_observer
        now = _monotonic() + self._ack_timeout
        for tally, count, deadline in counted:
            tally.add_batched(stream, count)
            self._acked += count
            self._inflight -= count
            if observer is not None:
                latency = max(now - deadline, 0.0)
                for _ in range(count):
                    observer(latency)


class _Lanes:
    """The Publisher's methods its retry table and fast batches call (a ``BatchLanes``)."""

    def __init__(self, pub: Publisher) -> None:
        self.fail, self.queue, self.write_out = pub._fail, pub._enqueue, pub._write_out
        self.send_now, self.settle, self.to_acks = pub._send_now, pub._confirm, pub._to_acks
        self.wake, self.refuse, self.tick = pub._wake_all, pub._refuse_batches, pub._fast_tick


def _log_ingest_once(stream: str | None, ingest: str, why: str) -> None:
    """Log the Publisher's ingest path once per process and stream (a Spark task each)."""
    key = (stream, ingest)
    if key in _LOGGED:
        return
    _LOGGED.add(key)
    if ingest == "fast":
        log.info("publisher to stream %r: fast-ingest batches (%s)", stream, why)
    else:
        log.info("publisher to stream %r: pipelined acks (%s)", stream, why)


_LOGGED: set[tuple[str | None, str]] = set()


def _tally_callback(tally: AckTally) -> Callable[[asyncio.Future[PubAck]], None]:
    def done(future: asyncio.Future[PubAck]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            tally.errors.append(error)
        else:
            ack = future.result()
            tally.add(ack.stream, ack.seq, ack.duplicate)

    return done
