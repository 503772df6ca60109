"""Source and sink share one unknown-option policy: refuse, and say what to use instead."""

from __future__ import annotations

import pytest

from oncestream import ConfigError
from oncestream.spark._options import KAFKA_OPTIONS, check_known
from oncestream.spark._sink_options import SINK_OPTIONS, SinkOptions
from oncestream.spark._source_options import SOURCE_OPTIONS, SourceOptions

URL = "nats://127.0.0.1:4222"


def _source(**options: str) -> SourceOptions:
    return SourceOptions.from_spark_options({"servers": URL, "stream": "A", **options})


def _sink(**options: str) -> SinkOptions:
    return SinkOptions.from_spark_options({"servers": URL, **options})


@pytest.mark.parametrize(
    ("key", "source_hint", "sink_hint"),
    [
        ("subscribe", "use 'stream' / 'subjects'", "use 'stream'"),
        ("subscribePattern", "use 'subjects'", "has no jetstream counterpart"),
        ("assign", "use 'stream' / 'subjects'", "use 'stream'"),
        ("kafka.bootstrap.servers", "use 'servers'", "use 'servers'"),
        ("startingOffsetsByTimestamp", "use 'startingTimestamp'", "has no jetstream counterpart"),
        ("endingOffsetsByTimestamp", "use 'endingTimestamp'", "has no jetstream counterpart"),
        ("groupIdPrefix", "Spark's checkpoint", "Spark's checkpoint"),
        ("topic", "use 'stream'", "use 'stream' / 'subject'"),
        ("kafka.acks", "PubAck", "PubAck"),
        ("kafka.max.in.flight.requests.per.connection", "no jetstream", "use 'maxInflight'"),
        ("kafka.retries", "no jetstream", "use 'maxAttempts'"),
        ("kafka.linger.ms", "Kafka client settings have no counterpart", "Kafka client settings"),
        ("fetchOffset.numRetries", "use 'retryTimeout'", "has no jetstream counterpart"),
        ("kafka.security.protocol", "use 'tlsCaFile'", "use 'tlsCaFile'"),
        ("kafka.sasl.jaas.config", "use 'user' / 'password'", "'token' / 'nkeySeed' / 'creds'"),
    ],
)
def test_kafka_names_get_the_jetstream_name_or_a_reason(
    key: str, source_hint: str, sink_hint: str
) -> None:
    with pytest.raises(ConfigError, match="unknown option for the jetstream source") as info:
        _source(**{key: "x"})
    assert f"'{key}'" in str(info.value) and source_hint in str(info.value)
    with pytest.raises(ConfigError, match="unknown option for the jetstream sink") as info:
        _sink(**{key: "x"})
    assert f"'{key}'" in str(info.value) and sink_hint in str(info.value)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("maxMesagesPerTrigger", "maxMessagesPerTrigger"),
        ("startingOffset", "startingOffsets"),
        ("subject", "subjects"),
        ("failOnDataLose", "failOnDataLoss"),
        ("server", "servers"),
    ],
)
def test_source_misspellings_get_did_you_mean(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}': did you mean '{suggestion}'"):
        _source(**{key: "1"})


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("maxInFlight2", "maxInflight"), ("ackTimout", "ackTimeout"), ("subjects", "subject")],
)
def test_the_sink_refuses_unknown_options_too(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=f"did you mean '{suggestion}'"):
        _sink(**{key: "1"})


def test_unknown_without_any_match_lists_the_known_options() -> None:
    with pytest.raises(ConfigError) as info:
        _sink(zzzz="1", qqqq="2")
    message = str(info.value)
    assert "unknown options for the jetstream sink: 'zzzz'; 'qqqq'" in message
    assert (
        "Known options:" in message and "maxInflight" in message and "docs/spark-sink.md" in message
    )


def test_include_headers_on_the_sink_says_how_headers_are_written() -> None:
    with pytest.raises(ConfigError, match="publishes a 'headers' column"):
        _sink(includeHeaders="true")
    assert _source(includeHeaders="true").include_headers


def test_known_options_any_case_and_spark_internal_ones_pass() -> None:
    assert _source(MAXMESSAGESPERTRIGGER="5", path="x").max_messages_per_trigger == 5
    sink = _sink(checkpointLocation="/chk", queryName="q", MAXINFLIGHT="7", stream="OUT")
    assert sink.publisher.max_inflight == 7 and sink.checkpoint == "/chk"
    check_known({"servers": URL}, SOURCE_OPTIONS, "source")
    check_known({"servers": URL}, SINK_OPTIONS, "sink")


def test_every_kafka_counterpart_is_a_real_option() -> None:
    real = {name.lower() for name in (*SOURCE_OPTIONS, *SINK_OPTIONS)}
    for key, (names, note) in KAFKA_OPTIONS.items():
        # A Kafka name may be its own counterpart only where the source accepts it
        # (the entry then tells the sink which source options it is).
        own = any(n.lower() == key.lower() for n in names)
        assert note and (not own or key in SOURCE_OPTIONS), key
        assert all(name.lower() in real for name in names), key


@pytest.mark.parametrize(
    ("starting", "ending", "ok"),
    [
        ('{"A": 10}', '{"A": 5}', False),
        ('{"A": 10}', '{"A": 9}', False),
        ('{"A": 10}', '{"A": 10}', True),  # empty range: exclusive end equals the start
        ('{"A": 10}', '{"A": 11}', True),
        ("earliest", '{"A": 5}', True),
        ('{"A": 10}', "latest", True),
    ],
)
def test_ending_before_starting_is_refused(starting: str, ending: str, ok: bool) -> None:
    if ok:
        _source(startingOffsets=starting, endingOffsets=ending)
        return
    with pytest.raises(ConfigError, match=r"endingOffsets.*stream 'A'.*before.*startingOffsets"):
        _source(startingOffsets=starting, endingOffsets=ending)


@pytest.mark.parametrize(
    ("key", "value", "seconds"),
    [("connectTimeout", "2s", 2.0), ("requestTimeout", "500ms", 0.5), ("requestTimeout", "3", 3.0)],
)
def test_connection_durations(key: str, value: str, seconds: float) -> None:
    opts = _source(**{key: value})
    assert (
        getattr(opts.connect, "connect_timeout" if key == "connectTimeout" else "request_timeout")
        == seconds
    )


def test_sink_publisher_durations() -> None:
    opts = _sink(ackTimeout="1m", retryBackoff="10ms, 1s")
    assert opts.publisher.ack_timeout == 60.0
    assert opts.publisher.retry_backoff == (0.01, 1.0)


def test_spark_lower_cases_keys_and_the_message_still_names_kafkas_option() -> None:
    """Spark hands options over with lower-case keys; the hint keeps the Kafka spelling."""
    with pytest.raises(ConfigError) as info:
        _source(maxoffsetspertrigger="5", startingoffsetsbytimestamp="{}")
    message = str(info.value)
    assert (
        "'startingoffsetsbytimestamp': Kafka's 'startingOffsetsByTimestamp'; "
        "use 'startingTimestamp'" in message
    )
    assert "maxoffsetspertrigger" not in message  # accepted: Kafka's name works on the source


def test_kafka_names_the_source_accepts_are_refused_by_the_sink() -> None:
    with pytest.raises(ConfigError) as info:
        _sink(maxOffsetsPerTrigger="5")
    assert "has no jetstream counterpart on the sink" in str(info.value)
    assert "the jetstream source takes 'maxOffsetsPerTrigger'" in str(info.value)
