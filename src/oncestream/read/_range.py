"""Reading sequence ranges of a stream without a durable consumer.

The one range reader of oncestream: the audit (:func:`read_stream`), the
Spark source (:class:`RangeReader`, turned into Arrow batches under
``spark/``) and the sink's stored-id check read through it; the last
message of a subject and lineage ids are in :mod:`oncestream.streams`. Frames arrive raw through the
connection's adapter (:mod:`oncestream._nats`), never as nats-py ``Msg``
objects on the fast path.

Two ways to read a range, both ending exactly at its last sequence:

* **direct get** (streams with ``allow_direct``, batched ``DIRECT.GET``):
  ``{"seq": s, "batch": n, "next_by_subj": filter}``; the answer ends with a
  ``204 EOB`` status. No consumer.
* **ephemeral ordered consumer** (``ack_policy none``, memory storage,
  ``opt_start_seq``, no-wait pulls); sequence and time come from the
  ``$JS.ACK`` reply subject.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .._connection import Connection
from .._errors import (
    JetStreamError,
    MessageNotFound,
    NoResponders,
    OncestreamError,
    OperationTimeout,
)
from .._headers import SEQUENCE, SUBJECT, TIME_STAMP, direct_value, msg_id_key, own_block
from .._message import ack_layout
from .._nats import FrameSink, FrameSubscription, status_code
from .._options import parse_duration, server_time
from .._retry import Unavailable, is_transient, leader_stream_info, retrying, stream_missing
from ..streams import StoredMessage

__all__ = [
    "RANGE_CONSUMER_PREFIX",
    "RangeReader",
    "StreamRecord",
    "delete_consumer_later",
    "iter_messages",
    "nth_sequence",
    "read_stream",
]

log = logging.getLogger(__name__)

_UNBOUNDED = 1 << 62

#: Names of the short-lived consumers a range read creates (ack policy none, memory
#: storage, deleted after the read or by the server after a minute idle).
RANGE_CONSUMER_PREFIX = "oncestream_read_"


# --------------------------------------------------------------------------- ranges


class _Request:
    """One pull / direct-get request: its own inbox subscription and collected frames."""

    __slots__ = ("future", "sink", "sub")

    def __init__(
        self, future: asyncio.Future[None], sink: FrameSink, sub: FrameSubscription
    ) -> None:
        self.future, self.sink, self.sub = future, sink, sub


class RangeReader:
    """Read sequences ``[first, last]`` of one stream, chunk by chunk, one request ahead.

    Transient failures (a request unanswered for ``idle_timeout``, ``503`` no
    responders because the consumer's node died, a leader election) are
    retried for ``retry_timeout`` seconds: the reader drops its requests and
    its consumer and continues with a new consumer (or direct get) at the
    first sequence not yet returned, so the frames returned are exactly those
    of an undisturbed read, without duplicates or gaps.

    On a replicated stream the consumer (or direct get) may be served by a
    follower that has not applied the newest messages yet and would end the
    range early; so when a replicated range runs dry before ``last``, the
    stream leader is asked (``STREAM.MSG.GET`` with ``next_by_subj``) whether a
    matching message is left, and if so the read continues after a retry. A
    direct get of an unfiltered range also checks each jump in its sequences
    with the leader: a replica missing a message in the middle of its store
    would otherwise step over it as over a deleted one (:meth:`_check_holes`).

    Args:
        conn: an open connection.
        stream: the stream name.
        first, last: the inclusive sequence range.
        subjects: server-side subject filters (empty: all).
        direct: use batched direct get (the stream has ``allow_direct``; one
            filter at most, otherwise a consumer is used).
        batch: messages per request.
        retry_timeout: seconds to keep retrying one transient failure (0: none).
        replicated: the stream has replicas (see above).
        limit: stop after this many messages (None: the whole range).
        headers_only: consumer path only: the server sends no payloads.
        idle_timeout: seconds without any frame before a request counts as
            lost (default: the connection's request timeout).
        budget_source: what sets ``retry_timeout``, named when the budget runs out.

    Example::

        reader = RangeReader(conn, "ORDERS", 1, 1000, (), direct=True)
        while (chunk := await reader.next_chunk()) is not None:
            print(len(chunk.datas), reader.last_seen)
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        first: int,
        last: int,
        subjects: tuple[str, ...] = (),
        *,
        direct: bool,
        batch: int = 8192,
        retry_timeout: float = 30.0,
        replicated: bool = False,
        limit: int | None = None,
        headers_only: bool = False,
        idle_timeout: float | None = None,
        budget_source: str = "the caller's retry budget",
    ) -> None:
        self.conn = conn
        self.budget_source = budget_source
        self.stream = stream
        self.first = first
        self.last = last
        self.subjects = subjects
        self.direct = direct and len(subjects) <= 1
        self.batch = batch
        self.retry_timeout = parse_duration("RangeReader retry_timeout", retry_timeout)
        self.replicated = replicated
        self.headers_only = headers_only
        self.idle_timeout = idle_timeout or conn.options.request_timeout
        #: How many times the reader recovered from a transient failure.
        self.retries = 0
        #: The sequence of the last message returned (None before the first).
        self.last_seen: int | None = None
        self._remaining = _UNBOUNDED if limit is None else limit
        self._next_seq = first
        self._done = first > last or self._remaining <= 0
        self._pending: _Request | None = None
        self._consumer: str | None = None
        self._started = False
        # One subscription per request, so a late frame of an earlier (or abandoned)
        # request can never be mistaken for part of the next one.
        self._requests: list[_Request] = []

    async def _start(self) -> None:
        self._started = True
        if not self.direct:
            name = f"{RANGE_CONSUMER_PREFIX}{uuid.uuid4().hex[:16]}"
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
            if self.headers_only:
                config["headers_only"] = True
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
        count = min(self.batch, self.last - self._next_seq + 1, self._remaining)

        def done() -> None:
            if not future.done():
                future.set_result(None)

        # Direct get answers end with a 204 EOB status; a no_wait pull ends with a
        # 404/408 status, or with nothing once exactly `count` messages came.
        sink = FrameSink(_UNBOUNDED if self.direct else count, not self.direct, done)
        request = _Request(future, sink, await conn.subscribe_frames(inbox, sink))
        self._requests.append(request)
        if self.direct:
            body: dict[str, Any] = {"seq": self._next_seq, "batch": count}
            if self.subjects:
                body["next_by_subj"] = self.subjects[0]
            subject = f"{conn.prefix}.DIRECT.GET.{self.stream}"
        else:
            body = {"batch": count, "no_wait": True}
            subject = f"{conn.prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}"
        # Not awaited, so the server sends while the caller converts; a failed
        # publish shows as an unanswered request.
        publish = asyncio.ensure_future(conn.publish(subject, orjson.dumps(body), reply=inbox))
        publish.add_done_callback(_ignore_result)
        return request

    async def _wait(self, request: _Request) -> FrameSink:
        """The request's frames; OperationTimeout once ``idle_timeout`` passes without any."""
        idle = self.idle_timeout
        seen = 0
        while True:
            try:
                async with asyncio.timeout(idle):
                    await asyncio.shield(request.future)
                return request.sink
            except TimeoutError:
                if len(request.sink.datas) == seen:
                    raise OperationTimeout(
                        f"reading stream {self.stream!r}: no answer from the server for "
                        f"{idle:g}s (the request timeout)"
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
            raise NoResponders(where, transient=True)
        if code == b"409" and ("Leadership Change" in text or "Consumer Deleted" in text):
            raise Unavailable(where)
        raise JetStreamError(where, code=int(code) if code.isdigit() else 0)

    def _seq(self, chunk: FrameSink, index: int) -> int:
        if self.direct:
            found = direct_value(chunk.headers[index] or b"", SEQUENCE)
            if found is None or not found.isdigit():
                raise OncestreamError(
                    f"reading stream {self.stream!r}: a direct get answer has no Nats-Sequence"
                )
            return int(found)
        tokens = chunk.replies[index].split(b".")
        return int(tokens[ack_layout(len(tokens)).stream_seq])

    def sequence(self, chunk: FrameSink, index: int) -> int:
        """The stream sequence of message ``index`` of a chunk :meth:`next_chunk` returned."""
        return self._seq(chunk, index)

    def _trim(self, chunk: FrameSink) -> int | None:
        """Drop frames past ``last``; return the last sequence seen before (None: no frames)."""
        n = len(chunk.datas)
        if not n:
            return None
        seen = self._seq(chunk, n - 1)
        while n and self._seq(chunk, n - 1) > self.last:
            n -= 1
            for column in (chunk.datas, chunk.headers, chunk.subjects, chunk.replies):
                del column[n:]
        return seen

    async def next_chunk(self) -> FrameSink | None:
        """The next non-empty chunk of frames, or None when the range is exhausted.

        Raises:
            OperationTimeout: the server did not answer within the retry budget.
            StreamNotFound: the stream does not exist (any more).
            JetStreamError: the server answered with an unexpected status.
        """
        try:
            return await retrying(
                self._next_chunk,
                budget=self.retry_timeout,
                budget_source=self.budget_source,
                what=f"reading stream {self.stream!r} at sequence {self._next_seq}",
                on_retry=self._recover,
            )
        except BaseException:
            await self._close()
            raise

    async def _next_chunk(self) -> FrameSink | None:
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
            seen = self._trim(chunk)
            if self.direct and self.replicated and not self.subjects:
                await self._check_holes(chunk)
            if seen is None and self.replicated:
                await self._confirm_end()
            self._remaining -= len(chunk.datas)
            if chunk.datas:
                self.last_seen = min(seen or 0, self.last)
            if seen is None or seen >= self.last or self._remaining <= 0:
                self._done = True
            else:
                self._next_seq = seen + 1
                # Ask for the next chunk now, so the server sends it while the caller
                # converts. This chunk is returned whatever happens to that request.
                try:
                    self._pending = await self._request()
                except Exception as exc:  # asked again (and retried) on the next call
                    log.debug("reading stream %r: prefetch failed: %s", self.stream, exc)
            await self._release(request)
            if chunk.datas:
                return chunk

    async def _check_holes(self, chunk: FrameSink) -> None:
        """Raise Unavailable if the replica that answered skipped a message the leader holds.

        A direct get steps over a sequence its replica does not hold as over a deleted
        one, and any current replica may answer. nats-server has left a replica with a
        message missing in the middle of its store (a block file cut short, rebuilt on
        restart: raft's catch-up only refills past the replica's last sequence), which
        then answered reads without it (the fault campaign, finding 29). So each jump in
        the sequences of an unfiltered read is checked with the leader
        (``STREAM.MSG.GET``, which only the leader answers): a jump over deleted
        messages costs one request, an append-only stream none. The read is retried
        from the chunk's first sequence (another replica may answer), within the
        retry budget.
        """
        expected = self._next_seq
        for index in range(len(chunk.datas)):
            seq = self._seq(chunk, index)
            if seq > expected:
                try:
                    reply = await self.conn.api(
                        f"STREAM.MSG.GET.{self.stream}", {"seq": expected, "next_by_subj": ">"}
                    )
                    held = int(reply["message"]["seq"])
                except MessageNotFound:
                    held = seq
                if held < seq:
                    raise Unavailable(
                        f"reading stream {self.stream!r}: the replica serving the read skipped "
                        f"sequence {held}, which the stream leader holds (a replica missing a "
                        "message; the read is retried)"
                    )
            expected = seq + 1

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
        if isinstance(exc, NoResponders):
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


async def nth_sequence(
    conn: Connection,
    stream: str,
    after: int,
    n: int,
    subjects: tuple[str, ...],
    *,
    retry_timeout: float = 0.0,
    budget_source: str = "the caller's retry budget",
) -> tuple[int | None, bool]:
    """The sequence of the ``n``-th message after ``after`` that matches ``subjects``.

    Used to size micro-batches in messages when sequences and messages differ
    (subject filters, interior deletes). It walks a ``headers_only`` consumer:
    no payloads travel, only one small frame per message.

    Returns:
        ``(sequence, exhausted)``: the n-th (or, if fewer exist, the last) matching
        sequence or None when none matches, and whether fewer than ``n`` exist.
    """
    count, seen = await _walk(conn, stream, after, n, subjects, None, retry_timeout, budget_source)
    return seen, count < n


async def count_sequences(
    conn: Connection,
    stream: str,
    after: int,
    last: int,
    at_most: int,
    subjects: tuple[str, ...],
    *,
    retry_timeout: float = 0.0,
    budget_source: str = "the caller's retry budget",
) -> int:
    """How many messages of sequences ``(after, last]`` match ``subjects``, up to ``at_most``."""
    if last <= after or at_most <= 0:
        return 0
    count, _ = await _walk(
        conn, stream, after, at_most, subjects, last, retry_timeout, budget_source
    )
    return min(count, at_most)


async def _walk(
    conn: Connection,
    stream: str,
    after: int,
    limit: int,
    subjects: tuple[str, ...],
    last: int | None,
    retry_timeout: float,
    budget_source: str,
) -> tuple[int, int | None]:
    reader = RangeReader(
        conn,
        stream,
        after + 1,
        _UNBOUNDED if last is None else last,
        subjects,
        direct=False,
        limit=limit,
        headers_only=True,
        retry_timeout=retry_timeout,
        idle_timeout=conn.options.request_timeout * 2,
        budget_source=budget_source,
    )
    got = 0
    try:
        while (chunk := await reader.next_chunk()) is not None:
            got += len(chunk.datas)
    finally:
        await reader.close()
    return got, reader.last_seen


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One stored message as the audit sees it (``msg_id`` as ``_headers.msg_id_key`` keys it)."""

    seq: int
    subject: str
    msg_id: str | None
    timestamp: str
    data: bytes


def _record(data: bytes, headers: bytes) -> StreamRecord:
    seq = direct_value(headers, SEQUENCE)
    ts = direct_value(headers, TIME_STAMP)
    subject = direct_value(headers, SUBJECT)
    return StreamRecord(
        seq=int(seq) if seq and seq.isdigit() else 0,
        subject=subject.decode("utf-8", "replace") if subject else "",
        msg_id=msg_id_key(headers),
        timestamp=ts.decode() if ts else "",
        data=data,
    )


async def read_stream(
    conn: Connection,
    stream: str,
    *,
    start_seq: int = 1,
    batch: int = 4096,
    timeout: float = 10.0,
) -> AsyncIterator[list[StreamRecord]]:
    """Yield every message of ``stream`` present now (from ``start_seq``), in order, in chunks.

    Uses batched direct gets (the stream needs ``allow_direct``), which need no
    consumer and skip deleted sequences. On a replicated stream a follower that
    has not applied the newest messages yet may answer; the read then checks with
    the stream leader and continues, so it never ends before the ``last_seq``
    the stream reported at the start.

    Raises:
        StreamNotFound: when the stream does not exist.
        JetStreamError: when direct get is disabled on the stream.
        OperationTimeout: no answer for ``timeout`` seconds (:class:`Unavailable`:
            the stream had no leader for that long).
    """
    info = await led_stream_info(conn, stream, timeout)
    if not info["config"].get("allow_direct"):
        raise JetStreamError(
            f"stream {stream!r} does not allow direct get; the audit needs allow_direct=true",
            code=400,
        )
    state = info["state"]
    first = max(int(state.get("first_seq", 1)) or 1, start_seq)
    last = int(state.get("last_seq", 0))
    if int(state.get("messages", 0)) == 0:
        return
    # A replica behind the leader may answer a direct get and end the read early; the
    # reader then asks the leader and retries (within ``timeout``) instead of stopping.
    replicated = int(info["config"].get("num_replicas") or 1) > 1
    reader = RangeReader(
        conn,
        stream,
        first,
        last,
        direct=True,
        batch=batch,
        retry_timeout=timeout if replicated else 0,
        replicated=replicated,
        idle_timeout=timeout,
    )
    try:
        while (chunk := await reader.next_chunk()) is not None:
            yield [_record(d, h) for d, h in zip(chunk.datas, chunk.headers, strict=True) if h]
    finally:
        await reader.close()


# --------------------------------------------------------------------------- bounds


#: Seconds a read waits for a replicated stream's leader by default (``iter_messages``,
#: ``dlq replay`` and ``dlq ls``, ``tail``).
LEADER_PATIENCE = 30.0


async def _latest(conn: Connection, stream: str, info: dict[str, Any]) -> dict[str, Any]:
    """A followed stream's newest bounds: the leader's answer, else ``info`` (the last ones)
    when there is no answer now or a replica answered with its own state (a leader
    election); the caller polls again."""
    try:
        return await leader_stream_info(conn, stream)
    except OncestreamError as exc:  # Unavailable for a replica's own state
        if not is_transient(exc):
            raise
        return info


async def led_stream_info(conn: Connection, stream: str, patience: float) -> dict[str, Any]:
    """``STREAM.INFO`` answered by the stream's leader, waiting up to ``patience`` s for one.

    A read bounded by a leaderless replica's state would end early and say nothing
    (seen in the fault campaign: ``dlq replay`` replayed 0 of 94 dead letters right
    after a whole-cluster restart, answered by a replica whose store had been wiped).

    No answer, or a transient one (no meta leader, the stream offline), is waited
    out the same way.

    Raises:
        StreamNotFound: the stream does not exist.
        Unavailable: no leader answered within ``patience`` seconds (retry later);
            or the last transient error met, with a note on how long it was retried.
        ValueError: ``patience`` is negative or NaN.
    """
    return await retrying(
        lambda: leader_stream_info(conn, stream),
        budget=patience,
        what=f"STREAM.INFO {stream}",
        budget_source="the read's patience",
    )


# --------------------------------------------------------------------------- messages


def _stored(stream: str, chunk: FrameSink, index: int, direct: bool) -> StoredMessage:
    """Frame ``index`` of a chunk as a :class:`~oncestream.streams.StoredMessage`."""
    raw = chunk.headers[index] or b""
    if direct:
        seq = direct_value(raw, SEQUENCE)
        subject = direct_value(raw, SUBJECT)
        stamp = direct_value(raw, TIME_STAMP)
        return StoredMessage(
            stream=stream,
            seq=int(seq) if seq and seq.isdigit() else 0,
            subject=subject.decode("utf-8", "replace") if subject else "",
            data=bytes(chunk.datas[index]),
            raw_headers=own_block(raw, direct=True),
            time=server_time(stamp.decode() if stamp else "1970-01-01T00:00:00Z"),
        )
    tokens = chunk.replies[index].split(b".")
    layout = ack_layout(len(tokens))
    nanos = int(tokens[layout.timestamp_ns])
    return StoredMessage(
        stream=stream,
        seq=int(tokens[layout.stream_seq]),
        subject=bytes(chunk.subjects[index]).decode("utf-8", "replace"),
        data=bytes(chunk.datas[index]),
        raw_headers=bytes(raw),
        time=datetime.fromtimestamp(nanos / 1e9, UTC),
    )


async def iter_messages(
    conn: Connection,
    stream: str,
    *,
    start_seq: int = 1,
    subject: str | None = None,
    end_seq: int | None = None,
    follow: bool = False,
    stop: asyncio.Event | None = None,
    poll: float = 0.25,
    batch: int = 256,
    patience: float = LEADER_PATIENCE,
) -> AsyncIterator[StoredMessage]:
    """Stored messages in sequence order, without a durable consumer: the range reader's chunks.

    Nothing is acked. A stream with ``allow_direct`` is read with batched direct
    gets (no server state); any other with a short-lived ordered consumer that
    is deleted afterwards. Gaps (deleted messages) are skipped. With
    ``follow`` it waits for new messages (checking every ``poll`` seconds)
    until ``stop`` is set. The range to read comes from the stream's leader: while
    a replicated stream has none, it waits up to ``patience`` seconds for one at the
    start (following, it keeps the last range and waits for new messages).

    Raises:
        StreamNotFound: the stream does not exist (any more).
        Unavailable: the stream had no leader for ``patience`` seconds.

    Example::

        async for msg in iter_messages(conn, "ORDERS", subject="orders.eu", end_seq=100):
            print(msg.seq, msg.subject, msg.data)
    """
    info = await led_stream_info(conn, stream, patience)
    direct = bool(info["config"].get("allow_direct"))
    filters = (subject,) if subject else ()
    next_seq = max(start_seq, 1)
    while stop is None or not stop.is_set():
        last = int(info["state"].get("last_seq", 0))
        if end_seq is not None:
            last = min(last, end_seq)
        if next_seq <= last:
            reader = RangeReader(
                conn, stream, next_seq, last, filters, direct=direct, batch=batch, retry_timeout=0
            )
            try:
                while (chunk := await reader.next_chunk()) is not None:
                    for index in range(len(chunk.datas)):
                        yield _stored(stream, chunk, index, reader.direct)
            finally:
                await reader.close()
            next_seq = last + 1
        if not follow or (end_seq is not None and next_seq > end_seq):
            return
        if stop is None:
            await asyncio.sleep(poll)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await stop.wait()
        info = await _latest(conn, stream, info)
