"""Every value's range is checked by the one parser of its kind, and every user inherits it.

Issue 38: integers over 64 bits, durations over int64 nanoseconds, a far
timestamp and a ``nan`` reached the JetStream API, ``timedelta`` or
``datetime`` and ended in a raw traceback (``TypeError: Integer exceeds 64-bit
range``, ``OverflowError: date value out of range``). One row per value and
per component that takes it: a ConfigError naming the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from oncestream import ConfigError, ProcessorOptions
from oncestream._options import (
    INT64_MAX,
    MAX_DURATION,
    parse_duration,
    parse_epoch_millis,
    parse_int,
    parse_positive_int,
    parse_rate,
    parse_time,
    rfc3339,
)
from oncestream.demo._internal import DemoConfig
from oncestream.read import StartPosition
from oncestream.spark._source_options import SourceOptions
from oncestream.streams import ResetTarget, StreamSpec

HUGE = 10**20  # over 64 bits (the orjson TypeError of issue 38)
URL = "nats://127.0.0.1:4222"


def _source(**options: str) -> Callable[[], Any]:
    return lambda: SourceOptions.from_spark_options({"servers": URL, "stream": "A", **options})


ROWS: list[tuple[str, Callable[[], Any], str]] = [
    # -- the parsers themselves ------------------------------------------------------
    (
        "int-over-64-bits",
        lambda: parse_int("--n", HUGE),
        f"--n must be an integer at most {INT64_MAX}",
    ),
    ("int-text-over-64-bits", lambda: parse_int("--n", str(HUGE)), f"got '{HUGE}'"),
    ("int-below-minimum", lambda: parse_int("--n", -2, minimum=-1), "--n must be an integer >= -1"),
    ("positive-int-over-64-bits", lambda: parse_positive_int("n", HUGE), "at most"),
    (
        "duration-over-int64-ns",
        lambda: parse_duration("--d", "99999999999h"),
        f"at most {MAX_DURATION}s",
    ),
    ("duration-float-over-int64-ns", lambda: parse_duration("d", 1e300), "about 292 years"),
    ("time-ago-over-int64-ns", lambda: parse_time("--t", "99999999999h"), "--t must be at most"),
    ("rate-too-slow", lambda: parse_rate("--rate", "1e-9"), "from 0.001 (one every 1,000 s)"),
    ("rate-nan", lambda: parse_rate("--rate", "nan"), "got 'nan'"),
    ("rate-inf", lambda: parse_rate("--rate", float("inf")), "got inf"),
    ("rate-zero-without-allow-zero", lambda: parse_rate("--rate", 0), "--rate must be"),
    (
        "epoch-millis-past-9999",
        lambda: parse_epoch_millis("e", "253402300800000"),
        "253402300799999",
    ),
    ("epoch-millis-negative", lambda: parse_epoch_millis("e", "-5"), ">= 0"),
    # -- every component that takes such a value inherits the range ----------------
    ("reset-target-seq", lambda: ResetTarget(seq=HUGE), "reset seq must be an integer at most"),
    ("start-position-seq", lambda: StartPosition(seq=HUGE), "start seq must be an integer at most"),
    (
        "stream-spec-max-msgs",
        lambda: StreamSpec(name="S", subjects=("s",), max_msgs=HUGE),
        "max_msgs",
    ),
    (
        "stream-spec-max-bytes-below-minus-one",
        lambda: StreamSpec(name="S", subjects=("s",), max_bytes=-2),
        "max_bytes must be an integer >= -1",
    ),
    (
        "stream-spec-max-age",
        lambda: StreamSpec(name="S", subjects=("s",), max_age="99999999999h"),
        "max_age must be at most",
    ),
    (
        "processor-max-deliver",
        lambda: ProcessorOptions(max_deliver=HUGE),
        "max_deliver must be an integer at most",
    ),
    ("processor-ack-wait", lambda: ProcessorOptions(ack_wait=1e300), "ack_wait must be at most"),
    # A pruning round every 0.1 ms kept an idle worker at ~23% of a core.
    (
        "processor-prune-interval-too-short",
        lambda: ProcessorOptions(prune_interval=0.0001),
        "prune_interval must be 0 (never prune) or at least 0.1s",
    ),
    ("processor-prune-interval-1ms", lambda: ProcessorOptions(prune_interval="1ms"), "got '1ms'"),
    ("demo-rate-too-slow", lambda: DemoConfig(rate=1e-9), "rate (orders per second) must be"),
    (
        "demo-timeout-nan",
        lambda: DemoConfig(timeout=float("nan")),
        "timeout must be a finite duration",
    ),
    ("demo-timeout-huge", lambda: DemoConfig(timeout=1e300), "timeout must be at most"),
    # -- Spark source options (Kafka's names) ---------------------------------------
    (
        "spark-ending-timestamp-huge",
        _source(endingTimestamp=str(HUGE)),
        "'endingTimestamp' (milliseconds since the epoch) must be an integer from 0 to "
        "253402300799999",
    ),
    (
        "spark-starting-timestamp-negative",
        _source(startingTimestamp="-1"),
        "option 'startingTimestamp'",
    ),
    (
        "spark-starting-offsets-over-64-bits",
        _source(startingOffsets='{"A": 18446744073709551615}'),
        "the position of stream 'A' must be an integer at most",
    ),
    (
        "spark-max-offsets-over-64-bits",
        _source(maxOffsetsPerTrigger=str(HUGE)),
        "option 'maxOffsetsPerTrigger' must be an integer at most",
    ),
    (
        "spark-min-above-max-offsets",
        _source(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5"),
        "option 'minOffsetsPerTrigger' (10) is higher than 'maxOffsetsPerTrigger'",
    ),
    (
        "spark-min-above-max-messages",
        _source(minOffsetsPerTrigger="10", maxMessagesPerTrigger="9"),
        "the minimum must be <= the maximum",
    ),
    (
        "spark-retry-timeout-huge",
        _source(retryTimeout="99999999999h"),
        "option 'retryTimeout' must be at most",
    ),
]


@pytest.mark.parametrize(("make", "message"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_out_of_range_values_are_named(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        make()
    assert message in str(raised.value)


def test_rows_have_unique_ids() -> None:
    assert len({r[0] for r in ROWS}) == len(ROWS)


def test_the_edges_are_accepted() -> None:
    assert parse_int("n", INT64_MAX) == INT64_MAX
    assert parse_duration("d", f"{MAX_DURATION}s") == MAX_DURATION
    assert parse_rate("r", "0.001") == 0.001
    assert parse_rate("r", 0, allow_zero=True) == 0.0
    assert parse_epoch_millis("e", "253402300799999") == datetime(
        9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC
    )
    assert ResetTarget(seq=INT64_MAX).seq == INT64_MAX
    # A far-future endingTimestamp is Kafka's "to the end", not an error.
    assert _source(endingTimestamp="9999999999999")().ending_timestamp == 9999999999.999
    opts = _source(minOffsetsPerTrigger="5", maxOffsetsPerTrigger="5")()
    assert opts.min_messages_per_trigger == opts.max_messages_per_trigger == 5


def test_rfc3339_pads_the_year() -> None:
    # strftime("%Y") gives "1" for year 1 on Linux, which the server cannot parse.
    assert rfc3339(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000000Z"
    assert rfc3339(datetime(2026, 11, 22, 15, tzinfo=UTC)) == "2026-11-22T15:00:00.000000Z"
