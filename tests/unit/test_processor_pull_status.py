"""Pure logic of the continuous pull's status handling (no server: the state machine only)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from oncestream import (
    ConfigError,
    ConsumerNotFound,
    JetStreamError,
    NoResponders,
    ProcessorOptions,
    PullOptions,
)
from oncestream.read import MessageStream


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


async def test_no_responders_are_retried_with_a_capped_delay() -> None:
    # Without confirm_missing nothing asks the server: a run of 503s is never an
    # error by itself (a clustered consumer between leaders, its node cut off).
    conn = SimpleNamespace(prefix="$JS.API", nc=None)
    stream = MessageStream(conn, "S", "c", PullOptions(confirm_missing=False))  # type: ignore[arg-type]
    holds = []
    for _ in range(12):
        stream._on_status({"Status": "503"})
        holds.append(stream._hold_until - time.monotonic())
    assert not stream._errors and stream.no_responders_total == 12
    expected = [0.25, 0.5, 1.0] + [2.0] * 9  # growing, then capped
    assert all(abs(h - e) < 0.05 for h, e in zip(holds, expected, strict=True)), holds
    stream._on_status({"Status": "100"})  # the consumer answers again: a new run
    assert stream._no_responders == 0 and stream.consumer_checks == 0


async def test_unavailable_timeout_bounds_a_run_of_no_responders() -> None:
    conn = SimpleNamespace(prefix="$JS.API", nc=None)
    options = PullOptions(confirm_missing=False, unavailable_timeout="10ms")
    stream = MessageStream(conn, "S", "c", options)  # type: ignore[arg-type]
    stream._on_status({"Status": "503"})
    assert not stream._errors
    stream._unavailable_since = time.monotonic() - 0.02  # as if the run began 20 ms ago
    stream._on_status({"Status": "503"})
    error = stream._errors[0]
    assert isinstance(error, NoResponders) and error.transient
    assert "'c'" in str(error) and "'S'" in str(error) and "unavailable_timeout" in str(error)


@pytest.mark.parametrize("bad", [0, -1, "soon", True])
def test_unavailable_timeout_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match="unavailable_timeout"):
        PullOptions(unavailable_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unavailable_timeout"):
        ProcessorOptions(unavailable_timeout=bad)  # type: ignore[arg-type]


def test_a_bound_processor_never_asks_consumer_info() -> None:
    assert ProcessorOptions(bind=True).pull_options().confirm_missing is False
    assert ProcessorOptions().pull_options().confirm_missing is True
    assert ProcessorOptions(unavailable_timeout="1m").pull_options().unavailable_timeout == 60


class _Publishes:
    """A connection that takes pull requests and sends nothing back."""

    prefix, nc = "$JS.API", None

    def __init__(self) -> None:
        self.requests: list[bytes] = []

    async def publish(self, subject: str, data: bytes, reply: str = "") -> None:
        self.requests.append(data)


def _deliver(stream: MessageStream, n: int) -> None:
    for _ in range(n):
        stream._on_frame(b"t.a", b"$JS.ACK.S.c.1.1.1.0.0", b"x", None)


async def test_a_request_that_ends_without_a_408_is_asked_for_again() -> None:
    """Seed 52, trial 73: a request of 8,000 got 7 messages and ended without a 408;
    7,993 stayed "outstanding", above the refill threshold, and the member pulled
    only what its pin refresh asked for until the trial's drain timed out."""
    conn = _Publishes()
    stream = MessageStream(conn, "S", "c", PullOptions(batch=100, expires="5s"))  # type: ignore[arg-type]
    await stream._pull()
    _deliver(stream, 7)
    assert stream._pending_msgs == 93
    ends = time.monotonic() + 5 + 2 * stream.options.heartbeat
    stream._forget_ended_requests(ends - 0.1)  # still running: nothing changes
    assert stream._pending_msgs == 93 and not stream._repull_needed
    stream._forget_ended_requests(ends + 0.1)
    assert stream._pending_msgs == 0 and stream._repull_needed and stream.requests_lost == 1
    await stream._maybe_refill()
    assert len(conn.requests) == 2 and b'"batch":100' in conn.requests[1]


async def test_requests_the_server_ended_or_served_are_not_lost() -> None:
    conn = _Publishes()
    stream = MessageStream(conn, "S", "c", PullOptions(batch=100, expires="5s"))  # type: ignore[arg-type]
    await stream._pull()  # served in full
    _deliver(stream, 100)
    await stream._pull()  # ended by a 408 naming its unused part
    _deliver(stream, 30)
    stream._on_status({"Status": "408", "Nats-Pending-Messages": "70", "Nats-Pending-Bytes": "0"})
    await stream._pull()  # still running when the others would have ended
    _deliver(stream, 10)
    later = time.monotonic() + 5 + 2 * stream.options.heartbeat + 0.1
    stream._forget_ended_requests(later - 0.2)
    assert stream._pending_msgs == 90 and stream.requests_lost == 0
    # Only the running one remains; past its end what it owed is released.
    stream._forget_ended_requests(later + 1)
    assert stream._pending_msgs == 0 and stream.requests_lost == 1


async def test_only_what_the_ended_requests_owed_is_released() -> None:
    conn = _Publishes()
    stream = MessageStream(conn, "S", "c", PullOptions(batch=100, expires="5s"))  # type: ignore[arg-type]
    await stream._pull()
    _deliver(stream, 60)  # the first request: 40 still owed
    first_ends = time.monotonic() + 5 + 2 * stream.options.heartbeat
    stream._requests.append((first_ends + 60, stream._asked + 50))  # a later one of 50
    stream._asked += 50
    stream._pending_msgs += 50
    stream._forget_ended_requests(first_ends + 1)
    assert stream._pending_msgs == 50 and stream.requests_lost == 1
