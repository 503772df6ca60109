"""Wire-level helpers for the Publisher: header blocks, subject checks, pending entries.

The reply fast path (raw PubAck frames without nats-py ``Msg`` objects)
lives in :mod:`oncestream._nats`, with every other use of nats-py internals.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from .._errors import ConfigError, MessageTooLarge, TooManyInflight
from .._headers import (
    BLOCK_START_B,
    EXPECTED_LAST_MSG_ID,
    EXPECTED_LAST_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_STREAM,
    MSG_ID,
    HeaderValues,
    build_block,
    check_msg_id,
    check_user_headers,
)
from .._names import check_publish_subject, is_valid_subject

__all__ = [
    "AckTally",
    "HeaderValues",
    "Pending",
    "check_single_values",
    "check_subject",
    "conditional_headers",
    "frame_msg_id",
    "frame_subject",
    "id_only_frame",
    "late_duplicate",
    "too_large",
    "too_many_inflight",
]

# The common case (only a msg id header) formatted in one step.
_HPUB_ID_ONLY = b"HPUB %b %b%d %d %d\r\n" + BLOCK_START_B + MSG_ID.encode() + b": %b\r\n\r\n%b\r\n"
_ID_ONLY_HEADER_LEN = len(BLOCK_START_B + MSG_ID.encode() + b": \r\n\r\n")


def id_only_frame(expected_stream: str | None) -> tuple[bytes, int]:
    """The HPUB template for a publish with only a msg id (and ``Nats-Expected-Stream``).

    Returns ``(template, header length without the msg id)``; the template takes
    subject, inbox, token, header length, total length, msg id and data.
    """
    if expected_stream is None:
        return _HPUB_ID_ONLY, _ID_ONLY_HEADER_LEN
    line = EXPECTED_STREAM.encode() + b": " + expected_stream.encode() + b"\r\n"
    template = _HPUB_ID_ONLY.replace(b"\r\n\r\n%b", b"\r\n" + line.replace(b"%", b"%%") + b"\r\n%b")
    return template, _ID_ONLY_HEADER_LEN + len(line)


def frame_subject(cmd: bytes) -> str:
    """The subject of a ``PUB``/``HPUB`` frame."""
    return cmd.split(b" ", 2)[1].decode()


_ID_LINE = b"\r\n" + MSG_ID.encode() + b": "


def frame_msg_id(cmd: bytes) -> str:
    """The ``Nats-Msg-Id`` of an HPUB frame (the first header line of the Publisher's frames)."""
    start = cmd.index(_ID_LINE) + len(_ID_LINE)
    return cmd[start : cmd.index(b"\r\n", start)].decode()


def late_duplicate(data: bytes | bytearray) -> bool:
    """Whether a PubAck (of an extra copy of a re-sent message) says ``duplicate``."""
    try:
        return bool(orjson.loads(data).get("duplicate"))
    except (orjson.JSONDecodeError, AttributeError):
        return False


def check_single_values(headers: HeaderValues) -> None:
    """Refuse multi-valued headers (nats-py's public API carries one value per name)."""
    for key, value in headers.items():
        if not isinstance(value, str) and len(value) > 1:
            raise ConfigError(
                f"header {key!r} has {len(value)} values, but nats-py's public API (in use: "
                "see the oncestream.nats log) carries one value per header name"
            )


def _single_line(name: str, value: str) -> str:
    if not value or "\r" in value or "\n" in value:
        raise ConfigError(f"{name} must be a non-empty single line, got {value!r}")
    return value


def check_subject(subject: str) -> bytes:
    """The encoded subject, if it is a valid publish subject (nats-server's rules, no wildcards).

    Raises:
        ConfigError: naming the subject and the rule (see :mod:`oncestream._names`).
    """
    if not is_valid_subject(subject, wildcards=False):
        check_publish_subject(subject, "cannot publish to subject")
    return subject.encode()


def conditional_headers(
    msg_id: str,
    headers: HeaderValues | None,
    *,
    expected_stream: str | None = None,
    expected_last_seq: int | None = None,
    expected_last_subject_seq: int | None = None,
    expected_last_msg_id: str | None = None,
) -> bytes:
    """The header block for a publish with user headers and/or ``Nats-Expected-*`` checks.

    Raises:
        ConfigError: an unclean msg id (:func:`~oncestream._headers.check_msg_id`), a
            refused header (:func:`~oncestream._headers.check_user_headers`).
    """
    check_msg_id(msg_id)
    if headers:
        check_user_headers(headers)
    expect: dict[str, str] = {}
    if expected_stream is not None:
        expect[EXPECTED_STREAM] = _single_line("expected_stream", expected_stream)
    if expected_last_seq is not None:
        expect[EXPECTED_LAST_SEQ] = str(int(expected_last_seq))
    if expected_last_subject_seq is not None:
        expect[EXPECTED_LAST_SUBJECT_SEQ] = str(int(expected_last_subject_seq))
    if expected_last_msg_id is not None:
        expect[EXPECTED_LAST_MSG_ID] = check_msg_id(expected_last_msg_id, "expected_last_msg_id")
    return build_block(msg_id, headers, expect)


class AckTally:
    """The PubAcks of bulk publishes, counted instead of one future per message.

    ``Publisher.publish_many(..., tally=t)`` records each ack here: ``stored``
    (new messages), ``duplicates``, the highest ``max_seq``, the ``streams``
    that answered, and ``errors`` (each also raised by ``Publisher.flush``).
    """

    __slots__ = ("duplicates", "errors", "max_seq", "stored", "streams")

    def __init__(self) -> None:
        self.stored = self.duplicates = self.max_seq = 0
        self.streams: set[str] = set()
        self.errors: list[BaseException] = []

    def add_batched(self, stream: str, count: int) -> None:
        """Count ``count`` messages a fast-ingest flow ack confirmed (no sequence, no flag)."""
        self.stored += count
        if stream not in self.streams:
            self.streams.add(stream)

    def saw_seq(self, seq: int) -> None:
        """A stream sequence at or after every message counted so far (a batch's last)."""
        if seq > self.max_seq:
            self.max_seq = seq

    def add(self, stream: str, seq: int, duplicate: bool) -> None:
        """Count one PubAck."""
        if duplicate:
            self.duplicates += 1
        else:
            self.stored += 1
        if seq > self.max_seq:
            self.max_seq = seq
        if stream not in self.streams:
            self.streams.add(stream)


class Pending:
    """One unacknowledged publish: its complete HPUB frame and retry state."""

    __slots__ = ("attempts", "cmd", "deadline", "future", "msg_id", "subject")

    def __init__(
        self,
        cmd: bytes,
        future: asyncio.Future[Any] | AckTally,
        msg_id: str,
        subject: str,
        deadline: float,
    ) -> None:
        self.cmd = cmd
        self.future = future
        self.msg_id = msg_id
        self.subject = subject
        self.deadline = deadline
        self.attempts = 1


def too_large(msg_id: str, subject: str, size: int, max_payload: int) -> MessageTooLarge:
    """The error for a message whose headers + data exceed the server's max_payload."""
    return MessageTooLarge(
        f"message {msg_id!r} to {subject!r} is {size} bytes with headers, above the "
        f"server's max_payload of {max_payload} bytes",
        code=413,
    )


def too_many_inflight(inflight: int, max_inflight: int) -> TooManyInflight:
    """The error of fail-fast mode when ``max_inflight`` acks are outstanding."""
    return TooManyInflight(
        f"{inflight} publishes are awaiting a PubAck (max_inflight="
        f"{max_inflight}); flush() or use backpressure=True"
    )
