"""Pure logic of the continuous pull's status handling (no server: the state machine only)."""

from __future__ import annotations

from types import SimpleNamespace

from oncestream import ConsumerNotFound, JetStreamError, PullOptions
from oncestream.pull import MessageStream


def _stream(batch: int = 100) -> MessageStream:
    conn = SimpleNamespace(prefix="$JS.hub.API", nc=None)
    return MessageStream(conn, "S", "c", PullOptions(batch=batch))  # type: ignore[arg-type]


def test_pull_subject_uses_the_connection_prefix() -> None:
    assert _stream()._next_subject == "$JS.hub.API.CONSUMER.MSG.NEXT.S.c"


def test_request_timeout_releases_unused_part() -> None:
    stream = _stream()
    stream._pending_msgs = 100
    stream._on_status({"Status": "408", "Nats-Pending-Messages": "60", "Nats-Pending-Bytes": "0"})
    assert stream._pending_msgs == 40 and stream._repull_needed
    stream._on_status({"Status": "408"})
    assert stream._pending_msgs == 0


def test_heartbeat_changes_nothing() -> None:
    stream = _stream()
    stream._pending_msgs = 7
    stream._on_status({"Status": "100", "Description": "Idle Heartbeat"})
    assert stream._pending_msgs == 7 and not stream._errors


def test_consumer_deleted_and_max_bytes_are_errors() -> None:
    stream = _stream()
    stream._on_status({"Status": "409", "Description": "Consumer Deleted"})
    stream._on_status({"Status": "409", "Description": "Message Size Exceeds MaxBytes"})
    stream._on_status({"Status": "409", "Description": "Exceeded MaxWaiting"})
    errors = list(stream._errors)
    assert isinstance(errors[0], ConsumerNotFound)
    assert isinstance(errors[1], JetStreamError) and "max_bytes" in str(errors[1])
    assert len(errors) == 2  # MaxWaiting just ends the request: re-pull
    assert stream._repull_needed and stream._pending_msgs == 0


async def test_no_responders_is_retried_then_an_error() -> None:
    stream = _stream()
    for _ in range(4):
        stream._on_status({"Status": "503"})
    assert not stream._errors and stream._hold_until > 0  # re-pull later, with a delay
    stream._on_status({"Status": "503"})
    assert isinstance(stream._errors[0], ConsumerNotFound)
