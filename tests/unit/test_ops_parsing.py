"""Pure helpers behind the operating verbs: start positions, times, previews, ranges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oncestream import ConfigError, StartPosition
from oncestream._options import parse_time
from oncestream.cli._dlq import parse_range, replay_time
from oncestream.cli._tail import preview
from oncestream.process._replay import subject_matches
from oncestream.spark._source_options import SourceOptions
from oncestream.streams import ResetTarget

NOW = datetime(2026, 11, 22, 15, 0, tzinfo=UTC)


def test_parse_time() -> None:
    assert parse_time("t", "10m", now=NOW) == NOW - timedelta(minutes=10)
    assert parse_time("t", "2026-11-22T14:00:00Z") == NOW - timedelta(hours=1)
    assert parse_time("t", "2026-11-22T16:00:00+02:00") == NOW - timedelta(hours=1)
    assert parse_time("t", NOW) is NOW
    with pytest.raises(ConfigError, match="--from must be an ISO 8601 time"):
        parse_time("--from", "yesterday")
    # RFC 3339 allows a lowercase z (and t).
    assert parse_time("t", "2026-11-22t14:00:00z") == NOW - timedelta(hours=1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # fromisoformat reads a date alone as midnight and drops an offset after it.
        ("2026-11-22Z", r"needs a time of day and a zone, got the date '2026-11-22Z'"),
        ("2026-11-22+02:00", r"needs a time of day and a zone"),
        ("2026-11-22", r"needs a time of day and a zone"),
        # In range as written, out of range in UTC: refused, not an OverflowError later.
        ("0001-01-01T00:00:00+01:00", r"outside the times that can be given"),
        ("9999-12-31T23:59:59-01:00", r"outside the times that can be given"),
    ],
)
def test_parse_time_refuses_a_date_alone_and_times_past_utcs_range(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_time("--from", value)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # The one rule for a time without a zone, wherever a user types one: refused.
        (lambda: parse_time("--to-time", "2026-11-22T14:00:00"), r"--to-time needs a time zone"),
        (
            lambda: parse_time("t", datetime(2026, 11, 22, 14)),
            r"t needs a time zone, got the naive",
        ),
        (lambda: StartPosition(time="2026-11-22T14:00"), r"start time needs a time zone"),
        (lambda: ResetTarget(time=datetime(2026, 11, 22)), r"reset time needs a time zone"),
        (lambda: replay_time("2026-11-22T14:00:00", None), r"--at needs a time zone"),
        (
            lambda: SourceOptions.from_spark_options(
                {
                    "servers": "nats://127.0.0.1:4222",
                    "stream": "A",
                    "startingTimestamp": "2026-11-22T14:00:00",
                }
            ),
            r"option 'startingTimestamp' needs a time zone",
        ),
        # A duration ago only where it means something: not for --at, not in Spark options.
        (lambda: replay_time("10m", None), r"--at must be an ISO 8601 time .* use --in 10m"),
        (
            lambda: SourceOptions.from_spark_options(
                {"servers": "nats://127.0.0.1:4222", "stream": "A", "endingTimestamp": "10m"}
            ),
            r"must be an ISO 8601 time with a zone .* or milliseconds since the epoch",
        ),
    ],
)
def test_a_time_without_a_zone_is_refused_everywhere(call: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()


def test_start_position() -> None:
    assert StartPosition().to_config() == {"deliver_policy": "all"}
    assert StartPosition(new_only=True).to_config() == {"deliver_policy": "new"}
    assert StartPosition(seq=7).to_config() == {
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": 7,
    }
    timed = StartPosition(time=NOW).to_config()
    assert timed == {
        "deliver_policy": "by_start_time",
        "opt_start_time": "2026-11-22T15:00:00.000000Z",
    }
    assert StartPosition(time=NOW).matches(
        {"deliver_policy": "by_start_time", "opt_start_time": "2026-11-22T15:00:00.000000123Z"}
    )
    assert not StartPosition(seq=7).matches(
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 8}
    )
    assert StartPosition.describe_config({"deliver_policy": "new"}) == "new messages only"
    with pytest.raises(ConfigError, match="at most one start position"):
        StartPosition(seq=3, new_only=True)
    with pytest.raises(ConfigError, match="start seq must be a sequence >= 1"):
        StartPosition(seq=0)


def test_preview() -> None:
    assert preview(b"") == "<empty>"
    assert preview(b'{"id": 1}') == '{"id": 1}'
    assert preview(b"a\nb\x1b[0m") == "a\\nb\\x1b[0m"
    assert preview(b"\xff\xfe\x00") == "<binary, 3 bytes: ff fe 00>"
    cut = preview(b"x" * 250)
    assert cut.startswith("x" * 200) and cut.endswith("…(+50 bytes)")


def test_parse_range() -> None:
    assert parse_range(None) == (None, None)
    assert parse_range("5") == (5, 5)
    assert parse_range("3-9") == (3, 9)
    assert parse_range("-4") == (None, 4)
    assert parse_range("4-") == (4, None)
    for bad in ("x", "0", "9-3", "1-2-3"):
        with pytest.raises(ConfigError, match="--seq"):
            parse_range(bad)


def test_subject_matches() -> None:
    assert subject_matches("orders.>", "orders.eu.x")
    assert subject_matches("orders.*", "orders.eu")
    assert not subject_matches("orders.*", "orders.eu.x")
    assert not subject_matches("orders.>", "orders")
    assert subject_matches("a.b", "a.b") and not subject_matches("a.b", "a.c")


def test_processor_start_needs_a_created_consumer() -> None:
    from oncestream import ProcessorOptions

    assert ProcessorOptions(start=StartPosition(seq=3)).start == StartPosition(seq=3)
    with pytest.raises(ConfigError, match="start applies to a consumer the Processor creates"):
        ProcessorOptions(start=StartPosition(seq=3), bind=True)
    with pytest.raises(ConfigError, match="must be a StartPosition"):
        ProcessorOptions(start=3)  # type: ignore[arg-type]


def test_an_empty_start_time_is_refused_not_ignored() -> None:
    """``process --start-time ""`` named no time: refused like every other time flag (it
    used to be dropped, and the consumer was created delivering everything)."""
    from oncestream.cli._process_extras import start_position

    with pytest.raises(ConfigError, match=r"--start-time must be an ISO 8601 time.*got ''"):
        start_position(None, "", False)
