"""Read a sequence range of a stream into Arrow record batches (runs on executors).

Two wire paths, both bypassing nats-py's per-message ``Msg`` objects and
subscription queues (the per-message Python cost is what limits a Python
reader): raw MSG frames for our inbox are appended to plain lists by a hook
on the client's ``_process_msg``, and the metadata is extracted from them in
bulk with Arrow compute kernels.

* **direct get** (streams with ``allow_direct``, ADR-31 batched
  ``DIRECT.GET``): ``{"seq": s, "batch": n, "next_by_subj": filter}``; the
  server answers with the messages and a ``204 EOB`` status. No consumer.
* **ephemeral pull consumer** (fallback): ``ack_policy none``, memory
  storage, ``opt_start_seq``; sequence and timestamp come from the
  ``$JS.ACK`` reply subject, so no header parsing.

Both stop exactly at the range end: a request never asks for more messages
than there are sequences left in the range, and anything past it is cut.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from collections.abc import Awaitable
from typing import Any

import orjson
import pyarrow as pa

from .._connection import Connection, connect
from .._errors import (
    DataLossError,
    MessageNotFound,
    OncestreamError,
    OperationTimeout,
    ServerError,
)
from .._nats import FrameSink, FrameSubscription, status_code
from .._options import ConnectOptions
from .._retry import Unavailable, leader_stream_info, retrying, stream_missing
from ._columns import ARROW_SCHEMA, to_batch
from ._source_options import RETRY_BUDGET

__all__ = [
    "ARROW_SCHEMA",
    "RangeReader",
    "check_retention",
    "close_connections",
    "delete_consumer_later",
    "get_connection",
]

log = logging.getLogger("oncestream.spark.source")

# --------------------------------------------------------------------------- connections

_conn_lock = threading.Lock()
_connections: dict[tuple[int, ConnectOptions], Connection] = {}


async def get_connection(options: ConnectOptions) -> Connection:
    """One connection per process and options, reused by every partition a worker reads."""
    key = (os.getpid(), options)
    conn = _connections.get(key)
    if conn is not None and not conn.is_closed:
        return conn
    conn = await connect(options.replace(name="oncestream-spark-source"))
    with _conn_lock:
        _connections[key] = conn
    return conn


async def close_connections() -> None:
    """Close this process's cached connections (tests and orderly shutdown)."""
    with _conn_lock:
        mine = [k for k in _connections if k[0] == os.getpid()]
        conns = [_connections.pop(k) for k in mine]
    for conn in conns:
        await conn.close()


# --------------------------------------------------------------------------- retention


async def check_retention(
    conn: Connection,
    stream: str,
    first: int,
    last: int,
    *,
    fail_on_data_loss: bool,
    retry_timeout: float = 0.0,
) -> int:
    """Return where reading ``[first, last]`` can start, given the stream's retention.

    The stream's state comes from its leader; transient errors (a leader
    election) are retried for ``retry_timeout`` seconds.

    Raises:
        DataLossError: when ``fail_on_data_loss`` and sequences in the range
            were removed (max_age, max_msgs, max_bytes, purge) before being read.
    """
    if first > last:
        return first
    info = await retrying(
        lambda: leader_stream_info(conn, stream),
        budget=retry_timeout,
        budget_source=RETRY_BUDGET,
        what=f"STREAM.INFO {stream!r}",
    )
    first_seq = int(info["state"].get("first_seq", 0))
    if first_seq <= first:
        return first
    gap_end = min(first_seq - 1, last)
    text = (
        f"stream {stream!r}: sequences {first}..{gap_end} were removed (retention limit or "
        f"purge; the stream now starts at {first_seq}) before they were read"
    )
    if fail_on_data_loss:
        raise DataLossError(
            f"{text}; set option failOnDataLoss=false to skip such gaps (the messages are lost)"
        )
    log.warning("%s; skipping them because failOnDataLoss=false", text)
    return gap_end + 1


# --------------------------------------------------------------------------- reader


class _Request:
    """One pull / direct-get request: its own inbox subscription and collected frames."""

    __slots__ = ("future", "sink", "sub")

    def __init__(
        self, future: asyncio.Future[None], sink: FrameSink, sub: FrameSubscription
    ) -> None:
        self.future, self.sink, self.sub = future, sink, sub


class RangeReader:
    """Read sequences ``[first, last]`` of one stream, chunk by chunk, one request ahead.

    Transient failures (a request unanswered for ``requestTimeout``, ``503`` no
    responders because the consumer's node died, a leader election) are
    retried for ``retry_timeout`` seconds: the reader drops its requests and
    its consumer and continues with a new consumer (or direct get) at the
    first sequence not yet returned, so the rows returned are exactly those of
    an undisturbed read, without duplicates or gaps.

    On a replicated stream the consumer (or direct get) may be served by a
    follower that has not applied the newest messages yet and would end the
    range early; so when a replicated range runs dry before ``last``, the
    stream leader is asked (``STREAM.MSG.GET`` with ``next_by_subj``) whether a
    matching message is left, and if so the read continues after a retry.

    Args:
        conn: a connection from :func:`get_connection`.
        stream: the stream name.
        first, last: the inclusive sequence range.
        subjects: server-side subject filters (empty: all).
        direct: use batched direct get (the stream has ``allow_direct``).
        include_headers: fill the ``headers`` column.
        batch: messages per request.
        retry_timeout: seconds to keep retrying one transient failure (0: none).
        replicated: the stream has replicas; before a range ends early the
            leader confirms that no message is left in it (see below).

    Example::

        reader = RangeReader(conn, "ORDERS", 1, 1000, (), direct=True)
        while (batch := await reader.next_batch()) is not None:
            ...
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        first: int,
        last: int,
        subjects: tuple[str, ...],
        *,
        direct: bool,
        include_headers: bool = False,
        batch: int = 8192,
        retry_timeout: float = 30.0,
        replicated: bool = False,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.first = first
        self.last = last
        self.subjects = subjects
        # direct get filters on one subject; several filters go through a consumer.
        self.direct = direct and len(subjects) <= 1
        self.include_headers = include_headers
        self.batch = batch
        self.retry_timeout = retry_timeout
        self.replicated = replicated
        #: How many times the reader recovered from a transient failure.
        self.retries = 0
        self._next_seq = first
        self._done = first > last
        self._pending: _Request | None = None
        self._consumer: str | None = None
        self._started = False
        # One subscription per request, so a late frame of an earlier (or abandoned)
        # request can never be mistaken for part of the next one.
        self._requests: list[_Request] = []
        self._stream_name = pa.scalar(stream, pa.string())

    async def _start(self) -> None:
        self._started = True
        if not self.direct:
            name = f"oncestream_src_{uuid.uuid4().hex[:16]}"
            config: dict[str, Any] = {
                "name": name,
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": self._next_seq,
                "ack_policy": "none",
                "mem_storage": True,
                "num_replicas": 1,
                "inactive_threshold": 60_000_000_000,
                "max_waiting": 16,
            }
            if len(self.subjects) == 1:
                config["filter_subject"] = self.subjects[0]
            elif self.subjects:
                config["filter_subjects"] = list(self.subjects)
            # Recorded first: a create that timed out may still have succeeded.
            self._consumer = name
            await self.conn.api(
                f"CONSUMER.CREATE.{self.stream}.{name}",
                {"stream_name": self.stream, "config": config, "action": "create"},
            )

    async def _request(self) -> _Request:
        """Send the next request; its future resolves when its frames are complete."""
        conn = self.conn
        inbox = conn.new_inbox()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        count = min(self.batch, self.last - self._next_seq + 1)

        def done() -> None:
            if not future.done():
                future.set_result(None)

        # Direct get answers end with a 204 EOB status; a no_wait pull ends with a
        # 404/408 status, or with nothing once exactly `count` messages came.
        sink = FrameSink(1 << 62 if self.direct else count, not self.direct, done)
        request = _Request(future, sink, await conn.subscribe_frames(inbox, sink))
        self._requests.append(request)
        if self.direct:
            body: dict[str, Any] = {"seq": self._next_seq, "batch": count}
            if self.subjects:
                body["next_by_subj"] = self.subjects[0]
            subject = f"{self.conn.prefix}.DIRECT.GET.{self.stream}"
        else:
            body = {"batch": count, "no_wait": True}
            subject = f"{self.conn.prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}"
        publish: Awaitable[None] = conn.publish(subject, orjson.dumps(body), reply=inbox)
        # Not awaited, so the server sends while Spark converts; a failed publish
        # shows as an unanswered request.
        asyncio.ensure_future(publish).add_done_callback(_ignore_result)
        return request

    async def _wait(self, request: _Request) -> FrameSink:
        """The request's frames; OperationTimeout once ``requestTimeout`` passes without any."""
        idle = self.conn.options.request_timeout
        seen = 0
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(request.future), idle)
                return request.sink
            except TimeoutError:
                if len(request.sink.datas) == seen:
                    raise OperationTimeout(
                        f"reading stream {self.stream!r}: no answer from the server for "
                        f"{idle:g}s (option requestTimeout)"
                    ) from None
                seen = len(request.sink.datas)

    def _check_status(self, chunk: FrameSink) -> None:
        if chunk.status is None or chunk.datas:
            return
        code = status_code(chunk.status)
        if code in (b"204", b"404", b"408"):
            return
        text = chunk.status.split(b"\r\n", 1)[0].decode(errors="replace")
        where = f"reading stream {self.stream!r}: server answered {text!r}"
        if code == b"503":
            raise Unavailable(where, no_responders=True)
        if code == b"409" and ("Leadership Change" in text or "Consumer Deleted" in text):
            raise Unavailable(where)
        raise ServerError(where)

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next chunk as a RecordBatch, or None when the range is exhausted.

        Raises:
            OperationTimeout: the server did not answer within the retry budget.
            StreamNotFound: the stream does not exist (any more).
            ServerError: the server answered with an unexpected status.
        """
        try:
            return await retrying(
                self._next_batch,
                budget=self.retry_timeout,
                budget_source=RETRY_BUDGET,
                what=f"reading stream {self.stream!r} at sequence {self._next_seq}",
                on_retry=self._recover,
            )
        except BaseException:
            await self._close()
            raise

    async def _next_batch(self) -> pa.RecordBatch | None:
        while True:
            if self._pending is None:
                if self._done:
                    await self._close()
                    return None
                if not self._started:
                    await self._start()
                self._pending = await self._request()
            request = self._pending
            chunk = await self._wait(request)
            self._pending = None
            self._check_status(chunk)
            batch, last_seen = self._to_batch(chunk)
            if last_seen is None and self.replicated:
                await self._confirm_end()
            if last_seen is None or last_seen >= self.last:
                self._done = True
            else:
                self._next_seq = last_seen + 1
                # Ask for the next chunk now, so the server sends it while Spark converts.
                # The rows of this chunk are returned whatever happens to that request.
                try:
                    self._pending = await self._request()
                except Exception as exc:  # asked again (and retried) on the next call
                    log.debug("reading stream %r: prefetch failed: %s", self.stream, exc)
            await self._release(request)
            if batch is not None:
                return batch

    async def _confirm_end(self) -> None:
        """Raise Unavailable if the leader holds a matching message in ``[_next_seq, last]``."""
        for subject in self.subjects or (">",):
            try:
                reply = await self.conn.api(
                    f"STREAM.MSG.GET.{self.stream}",
                    {"seq": self._next_seq, "next_by_subj": subject},
                )
            except MessageNotFound:
                continue
            seq = int(reply["message"]["seq"])
            if seq <= self.last:
                raise Unavailable(
                    f"reading stream {self.stream!r}: the replica serving the read has not "
                    f"applied sequence {seq} yet"
                )

    async def _recover(self, exc: BaseException) -> None:
        """Forget every request and the consumer; the next attempt starts at ``_next_seq``."""
        self.retries += 1
        if isinstance(exc, Unavailable) and exc.no_responders:
            missing = await stream_missing(self.conn, self.stream)
            if missing is not None:
                raise missing from exc
        self._pending = None
        while self._requests:
            await self._release(self._requests[-1])
        self._started = False
        if self._consumer is not None:
            name, self._consumer = self._consumer, None
            delete_consumer_later(self.conn, self.stream, name)

    def _to_batch(self, chunk: FrameSink) -> tuple[pa.RecordBatch | None, int | None]:
        return to_batch(
            chunk,
            self._stream_name,
            last=self.last,
            direct=self.direct,
            include_headers=self.include_headers,
        )

    async def _release(self, request: _Request) -> None:
        self._requests.remove(request)
        await request.sub.unsubscribe()  # best effort: the connection may be gone

    async def _close(self) -> None:
        self._done = True
        self._pending = None
        while self._requests:
            await self._release(self._requests[-1])
        if self._consumer is not None:
            name, self._consumer = self._consumer, None
            await _delete_consumer(self.conn, self.stream, name)

    async def close(self) -> None:
        """Release the inboxes and any consumer (idempotent)."""
        await self._close()


_background: set[asyncio.Future[None]] = set()


async def _delete_consumer(conn: Connection, stream: str, name: str) -> None:
    try:
        await conn.api(f"CONSUMER.DELETE.{stream}.{name}")
    except OncestreamError:
        pass  # inactive_threshold removes it anyway


def delete_consumer_later(conn: Connection, stream: str, name: str) -> None:
    """Delete an abandoned ephemeral consumer in the background (best effort).

    During a leader election the delete would only time out and hold up the
    retry; the consumer's ``inactive_threshold`` removes it anyway.
    """
    task = asyncio.ensure_future(_delete_consumer(conn, stream, name))
    _background.add(task)
    task.add_done_callback(_background.discard)


def _ignore_result(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("publishing a read request failed: %s", future.exception())
