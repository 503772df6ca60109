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
import re
import threading
import uuid
from collections.abc import Awaitable
from typing import Any, cast

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from .._connection import Connection, connect, translate_error
from .._errors import DataLossError, OncestreamError, ServerError
from .._options import ConnectOptions
from . import _wire

__all__ = [
    "ARROW_SCHEMA",
    "RangeReader",
    "check_retention",
    "close_connections",
    "get_connection",
]

log = logging.getLogger("oncestream.spark.source")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("sequence", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("msg_id", pa.string()),
        pa.field("headers", pa.map_(pa.string(), pa.list_(pa.string()))),
        pa.field("data", pa.binary()),
    ]
)

# The server appends these after the message's own headers, always in this order.
_DIRECT_RE = re.compile(
    rb"\r\nNats-Subject: ([^\r]*)\r\nNats-Sequence: (\d+)\r\nNats-Time-Stamp: ([^\r]*)\r\n"
)
_MSG_ID_RE = r"\nNats-Msg-Id: (?P<v>[^\r]*)\r\n"
_REQUEST_WAIT = 30.0

# --------------------------------------------------------------------------- connections

_conn_lock = threading.Lock()
_connections: dict[tuple[int, ConnectOptions], Connection] = {}


async def get_connection(options: ConnectOptions) -> Connection:
    """One connection per process and options, reused by every partition a worker reads."""
    key = (os.getpid(), options)
    conn = _connections.get(key)
    if conn is not None and not conn.nc.is_closed:
        return conn
    conn = await connect(options.replace(name="oncestream-spark-source"))
    _wire.install(conn.nc)
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
    conn: Connection, stream: str, first: int, last: int, *, fail_on_data_loss: bool
) -> int:
    """Return where reading ``[first, last]`` can start, given the stream's retention.

    Raises:
        DataLossError: when ``fail_on_data_loss`` and sequences in the range
            were removed (max_age, max_msgs, max_bytes, purge) before being read.
    """
    if first > last:
        return first
    info = await conn.stream_info(stream)
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


class RangeReader:
    """Read sequences ``[first, last]`` of one stream, chunk by chunk, one request ahead.

    Args:
        conn: a connection from :func:`get_connection`.
        stream: the stream name.
        first, last: the inclusive sequence range.
        subjects: server-side subject filters (empty: all).
        direct: use batched direct get (the stream has ``allow_direct``).
        include_headers: fill the ``headers`` column.
        batch: messages per request.

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
        self._next_seq = first
        self._done = first > last
        self._pending: asyncio.Future[_wire.FrameSink] | None = None
        self._consumer: str | None = None
        self._started = False
        # One subscription per request, so a late frame of an earlier request can
        # never be mistaken for part of the next one.
        self._subs: list[Any] = []
        self._publishing: asyncio.Future[None] | None = None
        self._stream_name = pa.scalar(stream, pa.string())

    async def _start(self) -> None:
        self._started = True
        if not self.direct:
            name = f"oncestream_src_{uuid.uuid4().hex[:16]}"
            config: dict[str, Any] = {
                "name": name,
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": self.first,
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
            await self.conn.api(
                f"CONSUMER.CREATE.{self.stream}.{name}",
                {"stream_name": self.stream, "config": config, "action": "create"},
            )
            self._consumer = name

    async def _request(self) -> asyncio.Future[_wire.FrameSink]:
        """Send the next request; the future resolves with its messages."""
        loop = asyncio.get_running_loop()
        nc: Any = self.conn.nc
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        self._subs.append(sub)
        future: asyncio.Future[_wire.FrameSink] = loop.create_future()
        count = min(self.batch, self.last - self._next_seq + 1)

        def done() -> None:
            if not future.done():
                future.set_result(sink)

        # Direct get answers end with a 204 EOB status; a no_wait pull ends with a
        # 404/408 status, or with nothing once exactly `count` messages came.
        sink = _wire.FrameSink(1 << 62 if self.direct else count, not self.direct, done)
        _wire.register(nc, sub._id, sink)
        if self.direct:
            body: dict[str, Any] = {"seq": self._next_seq, "batch": count}
            if self.subjects:
                body["next_by_subj"] = self.subjects[0]
            subject = f"{self.conn.prefix}.DIRECT.GET.{self.stream}"
        else:
            body = {"batch": count, "no_wait": True}
            subject = f"{self.conn.prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}"
        publish: Awaitable[None] = nc.publish(subject, orjson.dumps(body), reply=inbox)
        self._publishing = asyncio.ensure_future(publish)
        return future

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next chunk as a RecordBatch, or None when the range is exhausted.

        Raises:
            OperationTimeout: the server did not answer a request in time.
            ServerError: the server answered with an unexpected status.
        """
        while True:
            if self._pending is None:
                if self._done:
                    await self._close()
                    return None
                if not self._started:
                    await self._start()
                self._pending = await self._request()
            try:
                chunk = await asyncio.wait_for(self._pending, _REQUEST_WAIT)
            except TimeoutError as exc:
                await self._close()
                raise translate_error(exc, what=f"reading stream {self.stream!r}") from exc
            self._pending = None
            if chunk.status is not None and not chunk.datas:
                code = chunk.status[9:12]
                if code not in (b"204", b"404", b"408"):
                    await self._close()
                    text = chunk.status.split(b"\r\n", 1)[0].decode(errors="replace")
                    raise ServerError(f"reading stream {self.stream!r}: server answered {text!r}")
            batch, last_seen = self._to_batch(chunk)
            if last_seen is None or last_seen >= self.last:
                self._done = True
            else:
                self._next_seq = last_seen + 1
                # Ask for the next chunk now, so the server sends it while Spark converts.
                self._pending = await self._request()
            await self._unsubscribe(self._subs.pop(0))
            if batch is not None:
                return batch

    def _to_batch(self, chunk: _wire.FrameSink) -> tuple[pa.RecordBatch | None, int | None]:
        n = len(chunk.datas)
        if n == 0:
            return None, None
        if self.direct:
            joined = b"\n".join(cast("list[bytes]", chunk.headers))
            found = _DIRECT_RE.findall(joined)
            has_ids = b"Nats-Msg-Id:" in joined
            if len(found) != n:
                raise OncestreamError(
                    f"reading stream {self.stream!r}: unexpected direct get headers"
                )
            subjects, seqs, stamps = zip(*found, strict=True)
            subject = pa.array(subjects, pa.binary()).cast(pa.string())
            seq = pa.array(seqs, pa.binary()).cast(pa.string()).cast(pa.int64())
            timestamp = _parse_timestamps(pa.array(stamps, pa.binary()).cast(pa.string()))
        else:
            has_ids = any(h is not None and b"Nats-Msg-Id:" in h for h in chunk.headers)
            subject = pa.array(chunk.subjects, pa.binary()).cast(pa.string())
            tokens = pc.split_pattern(pa.array(chunk.replies, pa.binary()).cast(pa.string()), ".")
            width = len(chunk.replies[0].split(b"."))
            seq_i, ts_i = (5, 7) if width == 9 else (7, 9)
            seq = pc.cast(pc.list_element(tokens, seq_i), pa.int64())
            nanos = pc.cast(pc.list_element(tokens, ts_i), pa.int64())
            timestamp = pc.cast(pc.divide(nanos, 1000), pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            )
        last_seen = int(seq[n - 1].as_py())
        raw_headers = pa.array(chunk.headers, pa.binary())
        if has_ids:
            msg_id = pc.struct_field(pc.extract_regex(raw_headers, _MSG_ID_RE), [0]).cast(
                pa.string()
            )
        else:
            msg_id = pa.nulls(n, pa.string())
        if self.include_headers:
            headers = _headers_column(chunk.headers, self.direct)
        else:
            headers = pa.nulls(n, ARROW_SCHEMA.field("headers").type)
        columns = [
            pa.repeat(self._stream_name, n) if n else pa.array([], pa.string()),
            subject,
            seq,
            timestamp,
            msg_id,
            headers,
            pa.array(chunk.datas, pa.binary()),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
        if last_seen > self.last:
            batch = batch.filter(pc.less_equal(seq, self.last))
            last_seen = self.last
        return (batch if batch.num_rows else None), last_seen

    async def _unsubscribe(self, sub: Any) -> None:
        _wire.unregister(self.conn.nc, sub._id)
        try:
            await sub.unsubscribe()
        except Exception:  # the connection may be gone; nothing to release then
            pass

    async def _close(self) -> None:
        self._done = True
        while self._subs:
            await self._unsubscribe(self._subs.pop())
        if self._consumer is not None:
            name, self._consumer = self._consumer, None
            try:
                await self.conn.api(f"CONSUMER.DELETE.{self.stream}.{name}")
            except OncestreamError:
                pass  # inactive_threshold removes it anyway

    async def close(self) -> None:
        """Release the inbox and any consumer (idempotent)."""
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        self._pending = None
        await self._close()


def _parse_timestamps(stamps: pa.Array) -> pa.Array:
    """RFC 3339 UTC times with up to nanosecond fractions -> timestamp[us, UTC]."""
    secs = pc.strptime(
        pc.utf8_slice_codeunits(stamps, 0, 19), format="%Y-%m-%dT%H:%M:%S", unit="us"
    )
    fraction = pc.replace_substring(pc.utf8_slice_codeunits(stamps, 20, 26), "Z", "")
    micros = pc.cast(pc.utf8_rpad(fraction, 6, "0"), pa.int64())
    return pc.add(secs, pc.cast(micros, pa.duration("us"))).cast(pa.timestamp("us", tz="UTC"))


_SERVER_HEADERS = (
    "Nats-Stream",
    "Nats-Subject",
    "Nats-Sequence",
    "Nats-Time-Stamp",
    "Nats-Num-Pending",
    "Nats-Last-Sequence",
)


def _parse_user_headers(raw: bytes | None, direct: bool) -> list[tuple[str, list[str]]] | None:
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\r\n")[1:]
    if direct:
        # The server appends its own headers after the message's; drop that tail.
        for i, line in enumerate(lines):
            if line.startswith("Nats-Stream: "):
                lines = lines[:i]
                break
    out: dict[str, list[str]] = {}
    for line in lines:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), []).append(value.strip())
    return list(out.items()) or None


def _headers_column(raw: list[bytes | None], direct: bool) -> pa.Array:
    values = [_parse_user_headers(h, direct) for h in raw]
    return pa.array(values, ARROW_SCHEMA.field("headers").type)
