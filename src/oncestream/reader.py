"""Reading streams: sequence ranges without a durable consumer, and lineage ids.

Core code (no Spark): the audit, the Spark source and sink, and producer
sessions read streams through this module.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson

from ._connection import Connection
from ._errors import JetStreamError, OncestreamError
from ._nats import is_status, status_code

__all__ = ["StreamRecord", "lineage_id", "read_stream"]


def lineage_id(stream: str, sequence: int) -> str:
    """The message id of an output derived from input ``stream`` / ``sequence``.

    The jetstream sink assigns it to rows that carry the source's ``stream``
    and ``sequence`` columns; the audit's ``lineage`` key computes it.

    Example::

        lineage_id("ORDERS", 17)  # -> "ORDERS:17"
    """
    return f"{stream}:{sequence}"


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One stored message as the audit sees it."""

    seq: int
    subject: str
    msg_id: str | None
    timestamp: str
    data: bytes


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
    consumer and skip deleted sequences.

    Raises:
        StreamNotFound: when the stream does not exist.
        JetStreamError: when direct get is disabled on the stream.
    """
    info = await conn.stream_info(stream)
    if not info["config"].get("allow_direct"):
        raise JetStreamError(
            f"stream {stream!r} does not allow direct get; the audit needs allow_direct=true",
            code=400,
        )
    state = info["state"]
    seq = max(int(state.get("first_seq", 1)) or 1, start_seq)
    last = int(state.get("last_seq", 0))
    if int(state.get("messages", 0)) == 0:
        return
    # Raw frames, bypassing nats-py's Msg objects and header dicts (the per-message
    # cost that limits a Python reader); the few headers needed are cut out below.
    frames: list[tuple[bytes, bytes | None]] = []
    ended: asyncio.Event = asyncio.Event()

    def on_frame(
        _subject: bytes, _reply: bytes, data: bytes | bytearray, headers: bytes | None
    ) -> None:
        frames.append((bytes(data), headers and bytes(headers)))
        if is_status(headers):  # "NATS/1.0 204 EOB"
            ended.set()

    inbox = conn.new_inbox()
    sub = await conn.subscribe_frames(inbox, on_frame)
    subject = f"{conn.prefix}.DIRECT.GET.{stream}"
    try:
        while seq <= last:
            frames.clear()
            ended.clear()
            request = orjson.dumps({"seq": seq, "batch": min(batch, last - seq + 1)})
            await conn.publish(subject, request, reply=inbox)
            await asyncio.wait_for(ended.wait(), timeout)
            chunk = [_record(data, headers) for data, headers in frames[:-1] if headers]
            if chunk:
                yield chunk
            status = status_code(frames[-1][1])
            if not chunk or status != b"204":
                return
            seq = chunk[-1].seq + 1
    except TimeoutError as exc:
        raise OncestreamError(f"reading {stream!r} at sequence {seq}: no reply in time") from exc
    finally:
        await sub.unsubscribe()


_SEQ_RE = re.compile(rb"\r\nNats-Sequence: (\d+)")
_TS_RE = re.compile(rb"\r\nNats-Time-Stamp: ([^\r]*)")
_ID_RE = re.compile(rb"\r\nNats-Msg-Id: ([^\r]*)")
_SUBJECT_RE = re.compile(rb"\r\nNats-Subject: ([^\r]*)")


def _record(data: bytes, headers: bytes) -> StreamRecord:
    seq = _SEQ_RE.search(headers)
    ts = _TS_RE.search(headers)
    msg_id = _ID_RE.search(headers)
    subject = _SUBJECT_RE.search(headers)
    return StreamRecord(
        seq=int(seq.group(1)) if seq else 0,
        subject=subject.group(1).decode() if subject else "",
        msg_id=msg_id.group(1).decode() if msg_id else None,
        timestamp=ts.group(1).decode() if ts else "",
        data=data,
    )
