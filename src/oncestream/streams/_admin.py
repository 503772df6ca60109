"""Stream and consumer administration and single-message reads over the JetStream API.

Every call names the stream (and consumer) in its errors, so the CLI verbs can
print them as they are: :meth:`Connection.api` names them, for every caller.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from .._connection import Connection
from .._errors import ErrCode, JetStreamError, MessageNotFound
from .._headers import (
    LAST_SEQUENCE,
    NUM_PENDING,
    SEQUENCE,
    STREAM,
    SUBJECT,
    TIME_STAMP,
    msg_id_of,
    parse_block,
    render_block,
)
from .._names import check_consumer_name, check_stream_name
from .._options import rfc3339, server_time
from ._version import check_server_bugs

__all__ = [
    "StoredMessage",
    "add_stream",
    "consumer_info",
    "delete_consumer",
    "delete_message",
    "delete_stream",
    "get_message",
    "last_message",
    "list_consumers",
    "list_streams",
    "seq_at_time",
    "stream_info",
    "update_consumer",
    "update_stream",
]


_DIRECT_TAIL = frozenset((STREAM, SUBJECT, SEQUENCE, TIME_STAMP, NUM_PENDING, LAST_SEQUENCE))


_EPOCH = "1970-01-01T00:00:00Z"


async def stream_info(conn: Connection, stream: str) -> dict[str, Any]:
    """``STREAM.INFO``.

    Raises:
        ConfigError: ``stream`` is not a valid name.
        StreamNotFound: naming ``stream``.
    """
    check_stream_name(stream)
    return await conn.stream_info(stream)


async def consumer_info(conn: Connection, stream: str, consumer: str) -> dict[str, Any]:
    """``CONSUMER.INFO``.

    Raises:
        ConfigError: an invalid name.
        StreamNotFound / ConsumerNotFound: naming the stream or the consumer.
    """
    check_stream_name(stream)
    check_consumer_name(consumer)
    return await conn.consumer_info(stream, consumer)


async def add_stream(conn: Connection, config: dict[str, Any]) -> dict[str, Any]:
    """``STREAM.CREATE`` with a raw stream config (durations in nanoseconds); the stream's info.

    Every stream oncestream creates passes here, so the known-bug check for
    creates (:func:`~oncestream.streams._internal.check_server_bugs`) runs here once.
    """
    check_server_bugs(conn, "create", replicas=int(config.get("num_replicas") or 1))
    return await conn.api(f"STREAM.CREATE.{config['name']}", config)


async def update_stream(conn: Connection, config: dict[str, Any]) -> dict[str, Any]:
    """``STREAM.UPDATE`` with a raw stream config; the stream's info."""
    return await conn.api(f"STREAM.UPDATE.{config['name']}", config)


async def delete_stream(conn: Connection, stream: str) -> None:
    """``STREAM.DELETE``.

    Raises:
        StreamNotFound: naming ``stream``.
    """
    check_stream_name(stream)
    await conn.api(f"STREAM.DELETE.{stream}")


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
    infos = await _paged(conn, f"CONSUMER.LIST.{stream}", "consumers")
    return sorted(infos, key=lambda i: str(i.get("name", "")))


async def delete_consumer(conn: Connection, stream: str, consumer: str) -> None:
    """``CONSUMER.DELETE``; raises naming the stream or consumer when missing."""
    await consumer_info(conn, stream, consumer)
    await conn.api(f"CONSUMER.DELETE.{stream}.{consumer}")


async def update_consumer(
    conn: Connection, stream: str, consumer: str, changes: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Change settings of an existing consumer (``CONSUMER.CREATE`` with action ``update``).

    Args:
        changes: raw consumer config keys and their new values (durations in
            nanoseconds); the other settings stay as they are.

    Returns:
        The consumer's info before and after.

    Raises:
        StreamNotFound / ConsumerNotFound: naming the stream or the consumer.
        JetStreamError: the server refused, e.g. ``ack policy can not be updated``
            (err_code 10012) for a setting fixed at creation.
    """
    before = await consumer_info(conn, stream, consumer)
    config = {**(before.get("config") or {}), **changes}
    payload = {"stream_name": stream, "config": config, "action": "update"}
    after = await conn.api(f"CONSUMER.CREATE.{stream}.{consumer}", payload)
    return before, after


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """One message as its stream stores it, read by sequence or by subject.

    Attributes:
        stream: the stream holding it.
        seq: its stream sequence.
        subject: the subject it was published to.
        data: the payload.
        raw_headers: the ``NATS/1.0`` header block as stored (``b""``: none).
        time: when the stream stored it.
    """

    stream: str
    seq: int
    subject: str
    data: bytes
    time: datetime
    raw_headers: bytes = b""

    @property
    def headers(self) -> dict[str, list[str]]:
        """The message's own headers, name -> values (``_headers.parse_block``)."""
        return parse_block(self.raw_headers)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-sensitive, as the server compares), or None."""
        values = self.headers.get(name)
        return values[0] if values else None

    @property
    def msg_id(self) -> str | None:
        """The ``Nats-Msg-Id`` as the server read it, or None."""
        return msg_id_of(self.raw_headers)


async def get_message(
    conn: Connection,
    stream: str,
    *,
    seq: int | None = None,
    next_by_subject: str | None = None,
    last_by_subject: str | None = None,
    start_time: datetime | None = None,
) -> StoredMessage:
    """``STREAM.MSG.GET``: the message at ``seq``, or the first at/after it on a subject.

    With ``start_time`` (and ``next_by_subject``, ``">"`` for any subject): the first
    message stored at or after that time.

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
    if start_time is not None:
        body["start_time"] = rfc3339(start_time)
    reply = await conn.api(f"STREAM.MSG.GET.{stream}", body)
    return _from_api(stream, reply.get("message") or {})


async def seq_at_time(conn: Connection, stream: str, moment: datetime) -> int:
    """The sequence of the first message stored at or after ``moment``; the stream's last
    sequence + 1 when none was (the sequence the next message will get).

    Asks the server (``STREAM.MSG.GET`` with ``start_time``); nats-server 2.15.1 answers
    a time after the last message with the stream's first message, so an answer older
    than ``moment`` is checked with a binary search over message times.

    Raises:
        StreamNotFound: naming ``stream``.
    """
    try:
        msg = await get_message(conn, stream, next_by_subject=">", start_time=moment)
    except MessageNotFound:
        msg = None
    if msg is not None and msg.time >= moment:
        return msg.seq
    state = (await stream_info(conn, stream)).get("state", {})
    lo, hi = max(int(state.get("first_seq", 1) or 1), 1), int(state.get("last_seq", 0)) + 1
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            found = await get_message(conn, stream, seq=mid, next_by_subject=">")
        except MessageNotFound:
            hi = mid
            continue
        if found.seq >= hi:
            hi = mid
        elif found.time >= moment:
            hi = found.seq
        else:
            lo = found.seq + 1
    return lo


def _from_api(stream: str, msg: dict[str, Any]) -> StoredMessage:
    return StoredMessage(
        stream=stream,
        seq=int(msg.get("seq", 0)),
        subject=str(msg.get("subject", "")),
        data=base64.b64decode(msg["data"]) if msg.get("data") else b"",
        raw_headers=base64.b64decode(msg["hdrs"]) if msg.get("hdrs") else b"",
        time=server_time(str(msg.get("time") or _EPOCH)),
    )


async def last_message(
    conn: Connection, stream: str, subject: str, *, direct: bool = False
) -> StoredMessage | None:
    """The last message of ``stream`` on ``subject``, or None when there is none.

    Args:
        direct: read with a direct get (any replica may answer; the stream needs
            ``allow_direct``) instead of ``STREAM.MSG.GET`` (the leader answers).

    Raises:
        StreamNotFound: the stream does not exist.
        JetStreamError: any other error answer.
    """
    if not direct:
        try:
            return await get_message(conn, stream, last_by_subject=subject)
        except MessageNotFound:
            return None
    body = orjson.dumps({"last_by_subj": subject})
    answer = await conn.request(f"{conn.prefix}.DIRECT.GET.{stream}", body)
    headers: dict[str, str] = answer.headers or {}
    status = headers.get("Status")
    if status == "404":
        return None
    if status:
        raise JetStreamError(
            f"direct get of the last message on {subject!r}: {headers.get('Description', status)}",
            code=int(status) if status.isdigit() else 0,
        )
    own = {k: v for k, v in headers.items() if k not in _DIRECT_TAIL}
    stamp = headers.get(TIME_STAMP)
    return StoredMessage(
        stream=stream,
        seq=int(headers[SEQUENCE]),
        subject=headers.get(SUBJECT, subject),
        data=answer.data,
        raw_headers=render_block(own),
        time=server_time(stamp or _EPOCH),
    )


async def delete_message(conn: Connection, stream: str, seq: int) -> bool:
    """``STREAM.MSG.DELETE`` (no erase); False when the message was already gone."""
    try:
        await conn.api(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
    except MessageNotFound:
        return False
    except JetStreamError as exc:
        # No message at that sequence (deleted, or never stored): nats-server answers
        # 10043 ("sequence N not found") when nothing was removed, 10057 when the store
        # says there is no message there.
        if exc.err_code in (ErrCode.STREAM_MSG_DELETE_FAILED, ErrCode.SEQUENCE_NOT_FOUND):
            return False
        raise
    return True
