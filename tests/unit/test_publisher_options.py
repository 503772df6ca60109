"""PublisherOptions validation, Spark option parsing and the retry horizon (pure logic)."""

from __future__ import annotations

import pytest

from oncestream import ConfigError
from oncestream.publish import PubAck, PublisherOptions, PublisherStats
from oncestream.spark._options import publisher_options


def test_defaults_and_horizon() -> None:
    opts = PublisherOptions()
    assert (opts.max_inflight, opts.backpressure, opts.ack_timeout, opts.max_attempts) == (
        5000,
        True,
        5.0,
        5,
    )
    # 5 x 5 s + backoff before attempts 2..5: 0.05 + 0.25 + 1.0 + 1.0 (last value repeats)
    assert opts.retry_horizon == pytest.approx(25 + 2.3)
    assert [opts.backoff(a) for a in (2, 3, 4, 5, 9)] == [0.05, 0.25, 1.0, 1.0, 1.0]
    assert PublisherOptions(max_attempts=1).retry_horizon == 5.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_inflight": 0}, "max_inflight"),
        ({"max_inflight": True}, "max_inflight"),
        ({"max_inflight": 2.5}, "max_inflight"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2**63 - 1}, "max_attempts must be an integer from 1 to 1000"),
        ({"ack_timeout": 0}, "ack_timeout"),
        ({"ack_timeout": -1.0}, "ack_timeout"),
        ({"retry_backoff": ()}, "retry_backoff"),
        ({"retry_backoff": (0.1, -1)}, "retry_backoff"),
        ({"stream": "a.b"}, "stream"),
        ({"stream": ""}, "stream"),
    ],
)
def test_invalid_values_name_the_option(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        PublisherOptions(**kwargs)  # type: ignore[arg-type]
    assert repr(next(iter(kwargs.values()))) in str(info.value)


def test_options_are_frozen_and_keyword_only() -> None:
    opts = PublisherOptions()
    with pytest.raises(AttributeError):
        opts.max_inflight = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        PublisherOptions(10)  # type: ignore[misc]
    assert PublisherOptions(retry_backoff=[0, 1]).retry_backoff == (0.0, 1.0)  # type: ignore[arg-type]


def test_spark_publisher_options_case_insensitive_ignores_unknown() -> None:
    opts = publisher_options(
        {
            "MAXINFLIGHT": "100",
            "ackTimeout": "250ms",
            "maxattempts": "3",
            "retryBackoff": "10ms, 1s",
            "stream": "ORDERS",
            "backpressure": "false",
            "checkWindow": "false",
            "servers": "nats://127.0.0.1:4222",
            "somethingElse": "x",
        }
    )
    assert opts == PublisherOptions(
        max_inflight=100,
        ack_timeout=0.25,
        max_attempts=3,
        retry_backoff=(0.01, 1.0),
        stream="ORDERS",
        backpressure=False,
        check_window=False,
    )
    assert publisher_options({}) == PublisherOptions()


@pytest.mark.parametrize(
    ("key", "value"),
    [("maxInflight", "0"), ("ackTimeout", "soon"), ("maxAttempts", "x"), ("backpressure", "maybe")],
)
def test_spark_publisher_options_reject_bad_values(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        publisher_options({key: value})


def test_puback_and_stats_are_frozen_values() -> None:
    ack = PubAck("S", 3, True, None)
    assert ack == PubAck(stream="S", seq=3, duplicate=True)
    with pytest.raises(AttributeError):
        ack.seq = 4  # type: ignore[misc]
    assert PublisherStats() == PublisherStats(sent=0, acked=0, duplicates=0, retried=0, failed=0)
