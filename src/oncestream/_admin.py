"""Stream and consumer administration and single-message reads over the JetStream API.

Every call names the stream (and consumer) in its errors, so the CLI verbs can
print them as they are.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._connection import Connection
from ._errors import ConsumerNotFound, JetStreamError, MessageNotFound, StreamNotFound
from ._headers import parse_block
from ._names import check_consumer_name, check_stream_name

__all__ = [
    "StoredMessage",
    "consumer_info",
    "delete_consumer",
    "delete_message",
    "get_message",
    "iter_messages",
    "list_consumers",
    "list_streams",
    "stream_info",
]


def _stream_missing(stream: str, exc: StreamNotFound) -> StreamNotFound:
    return StreamNotFound(f"stream {stream!r} not found", code=exc.code, err_code=exc.err_code)


async def stream_info(conn: Connection, stream: str) -> dict[str, Any]:
    """``STREAM.INFO``.

    Raises:
        ConfigError: ``stream`` is not a valid name.
        StreamNotFound: naming ``stream``.
    """
    check_stream_name(stream)
    try:
        return await conn.stream_info(stream)
    except StreamNotFound as exc:
        raise _stream_missing(stream, exc) from exc


async def consumer_info(conn: Connection, stream: str, consumer: str) -> dict[str, Any]:
    """``CONSUMER.INFO``.

    Raises:
        ConfigError: an invalid name.
        StreamNotFound / ConsumerNotFound: naming the stream or the consumer.
    """
    check_stream_name(stream)
    check_consumer_name(consumer)
    try:
        return await conn.consumer_info(stream, consumer)
    except StreamNotFound as exc:
        raise _stream_missing(stream, exc) from exc
    except ConsumerNotFound as exc:
        raise ConsumerNotFound(
            f"consumer {consumer!r} not found on stream {stream!r}",
            code=exc.code,
            err_code=exc.err_code,
        ) from exc


async def _paged(conn: Connection, subject: str, field: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for _ in range(10_000):
        page = await conn.api(subject, {"offset": len(items)})
        got = page.get(field) or []
        items.extend(got)
        if not got or len(items) >= int(page.get("total", 0)):
            break
    return items


async def list_streams(conn: Connection) -> list[dict[str, Any]]:
    """Every stream's info, sorted by name."""
    infos = await _paged(conn, "STREAM.LIST", "streams")
    return sorted(infos, key=lambda i: str(i.get("config", {}).get("name", "")))


async def list_consumers(conn: Connection, stream: str) -> list[dict[str, Any]]:
    """Every consumer's info on ``stream``, sorted by name.

    Raises:
        StreamNotFound: naming ``stream``.
    """
    check_stream_name(stream)
    try:
        infos = await _paged(conn, f"CONSUMER.LIST.{stream}", "consumers")
    except StreamNotFound as exc:
        raise _stream_missing(stream, exc) from exc
    return sorted(infos, key=lambda i: str(i.get("name", "")))


async def delete_consumer(conn: Connection, stream: str, consumer: str) -> None:
    """``CONSUMER.DELETE``; raises naming the stream or consumer when missing."""
    await consumer_info(conn, stream, consumer)
    await conn.api(f"CONSUMER.DELETE.{stream}.{consumer}")


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """One message as stored in a stream (read with ``STREAM.MSG.GET``)."""

    stream: str
    seq: int
    subject: str
    time: datetime
    headers: dict[str, list[str]]
    data: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-sensitive, as stored), or None."""
        values = self.headers.get(name)
        return values[0] if values else None


def _parse_time(text: str) -> datetime:
    main, _, rest = text.partition(".")
    frac = "".join(c for c in rest if c.isdigit())[:6]
    moment = datetime.strptime(main.rstrip("Z"), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return moment.replace(microsecond=int(frac.ljust(6, "0")) if frac else 0)


async def get_message(
    conn: Connection,
    stream: str,
    *,
    seq: int | None = None,
    next_by_subject: str | None = None,
    last_by_subject: str | None = None,
) -> StoredMessage:
    """``STREAM.MSG.GET``: the message at ``seq``, or the first at/after it on a subject.

    Raises:
        StreamNotFound: naming ``stream``.
        MessageNotFound: no such message.
    """
    body: dict[str, Any] = {}
    if seq is not None:
        body["seq"] = seq
    if next_by_subject:
        body["next_by_subj"] = next_by_subject
    if last_by_subject:
        body["last_by_subj"] = last_by_subject
    try:
        reply = await conn.api(f"STREAM.MSG.GET.{stream}", body)
    except StreamNotFound as exc:
        raise _stream_missing(stream, exc) from exc
    msg = reply.get("message") or {}
    raw_headers = base64.b64decode(msg["hdrs"]) if msg.get("hdrs") else b""
    return StoredMessage(
        stream=stream,
        seq=int(msg.get("seq", 0)),
        subject=str(msg.get("subject", "")),
        time=_parse_time(str(msg.get("time", "1970-01-01T00:00:00Z"))),
        headers=parse_block(raw_headers),
        data=base64.b64decode(msg["data"]) if msg.get("data") else b"",
    )


async def delete_message(conn: Connection, stream: str, seq: int) -> bool:
    """``STREAM.MSG.DELETE`` (no erase); False when the message was already gone."""
    try:
        await conn.api(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
    except StreamNotFound as exc:
        raise _stream_missing(stream, exc) from exc
    except MessageNotFound:
        return False
    except JetStreamError as exc:
        if exc.err_code == 10057:  # no message at that sequence (deleted, or never stored)
            return False
        raise
    return True


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
) -> AsyncIterator[StoredMessage]:
    """Read stored messages in sequence order without a consumer (``STREAM.MSG.GET``).

    Nothing is acked and no server state is created. Gaps (deleted messages)
    are skipped. With ``follow`` it waits for new messages until ``stop`` is set.
    """
    seq = max(start_seq, 1)
    wildcard = subject or ">"
    while stop is None or not stop.is_set():
        if end_seq is not None and seq > end_seq:
            return
        try:
            msg = await get_message(conn, stream, seq=seq, next_by_subject=wildcard)
        except MessageNotFound:
            if not follow:
                return
            if stop is None:
                await asyncio.sleep(poll)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        await stop.wait()
            continue
        if end_seq is not None and msg.seq > end_seq:
            return
        yield msg
        seq = msg.seq + 1
