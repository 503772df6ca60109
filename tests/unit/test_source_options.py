"""SourceOptions parsing and the source's pure planning logic."""

from __future__ import annotations

import pytest

from oncestream._errors import ConfigError
from oncestream.spark._planning import MAX_PARTITION_SEQUENCES, plan_ranges, share
from oncestream.spark._source_options import EARLIEST, LATEST, SourceOptions

URL = "nats://127.0.0.1:4222"


def parse(**options: str) -> SourceOptions:
    return SourceOptions.from_spark_options({"servers": URL, **options})


def test_defaults_and_streams() -> None:
    opts = parse(stream="A, B")
    assert opts.streams == ("A", "B")
    assert opts.subjects == ()
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert opts.starting_for("A") == EARLIEST
    assert opts.ending_for("A") == LATEST


def test_keys_are_case_insensitive_and_typed() -> None:
    opts = parse(
        STREAM="S",
        subjects="orders.*, orders.eu.>",
        maxmessagespertrigger="100",
        maxBytesPerTrigger="4096",
        minPartitions="3",
        MAXRECORDSPERPARTITION="5000",
        failOnDataLoss="false",
        includeHeaders="TRUE",
        domain="hub",
    )
    assert opts.subjects == ("orders.*", "orders.eu.>")
    assert (opts.max_messages_per_trigger, opts.max_bytes_per_trigger) == (100, 4096)
    assert opts.min_partitions == 3
    assert opts.max_records_per_partition == 5000
    assert opts.fail_on_data_loss is False and opts.include_headers is True
    assert opts.connect.js_prefix == "$JS.hub.API"


def test_offsets_json() -> None:
    opts = parse(stream="A,B", startingOffsets='{"A": 1042, "B": -1}', endingOffsets='{"A": 2000}')
    assert opts.starting == {"A": 1042, "B": LATEST}
    assert opts.ending == {"A": 2000, "B": LATEST}
    assert parse(stream="A", startingOffsets="latest").starting == {"A": LATEST}
    assert parse(stream="A", startingOffsets="EARLIEST").starting == {"A": EARLIEST}


def test_kafka_offsets_json_per_partition() -> None:
    """Kafka's ``{"topic": {"partition": offset}}``: a stream is the one partition "0"."""
    opts = parse(
        stream="A,B",
        startingOffsets='{"A": {"0": 23}, "B": {"0": -1}}',
        endingOffsets='{"A": {"0": 40}}',
    )
    assert opts.starting == {"A": 23, "B": LATEST}
    assert opts.ending == {"A": 40, "B": LATEST}
    assert parse(stream="A", startingOffsets='{"A": {"0": -2}}').starting == {"A": EARLIEST}


def test_kafka_trigger_options() -> None:
    opts = parse(stream="A", maxOffsetsPerTrigger="7", minOffsetsPerTrigger="3")
    assert (opts.max_messages_per_trigger, opts.min_messages_per_trigger) == (7, 3)
    assert opts.trigger_delay == 900.0  # Kafka's default, 15 minutes
    assert parse(stream="A", minOffsetsPerTrigger="3", maxTriggerDelay="30s").trigger_delay == 30
    assert parse(stream="A", endingTimestamp="1700000000000").ending_timestamp == 1.7e9


def test_starting_timestamp() -> None:
    assert parse(stream="A", startingTimestamp="1700000000000").starting_timestamp == 1.7e9
    iso = parse(stream="A", startingTimestamp="2023-11-14T22:13:20Z").starting_timestamp
    assert iso == 1.7e9


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({}, r"option 'stream' is required"),
        ({"stream": "A", "servers": ""}, r"option 'servers' is required"),
        ({"stream": "A.B"}, r"'A\.B' is not a valid stream name"),
        ({"stream": "A,A"}, r"names a stream twice"),
        ({"stream": "A", "startingOffsets": "[1]"}, r"startingOffsets.*JSON object.*'\[1\]'"),
        ({"stream": "A", "startingOffsets": '{"A": 0}'}, r"sequence >= 1.*got 0"),
        ({"stream": "A", "startingOffsets": '{"A": "x"}'}, r"sequence >= 1.*got 'x'"),
        ({"stream": "A", "startingOffsets": '{"Z": 5}'}, r"'Z', which is not in option"),
        ({"stream": "A", "endingOffsets": "earliest"}, r"endingOffsets.*'latest' or a JSON"),
        ({"stream": "A", "endingOffsets": '{"A": -2}'}, r"earliest\) is not allowed"),
        ({"stream": "A", "maxMessagesPerTrigger": "-1"}, r"maxMessagesPerTrigger.*> 0.*'-1'"),
        ({"stream": "A", "maxBytesPerTrigger": "abc"}, r"maxBytesPerTrigger.*integer.*'abc'"),
        ({"stream": "A", "minPartitions": "0"}, r"minPartitions.*> 0"),
        ({"stream": "A", "maxRecordsPerPartition": "0"}, r"maxRecordsPerPartition.*> 0.*'0'"),
        ({"stream": "A", "maxRecordsPerPartition": "1e6"}, r"maxRecordsPerPartition.*'1e6'"),
        ({"stream": "A", "includeHeaders": "yes please"}, r"includeHeaders.*'yes please'"),
        ({"stream": "A", "startingTimestamp": "yesterday"}, r"startingTimestamp.*'yesterday'"),
        ({"stream": "A", "startingTimestamp": "2024-01-01T00:00:00"}, r"needs a time zone"),
        (
            {"stream": "A", "startingTimestamp": "1", "startingOffsets": "latest"},
            r"either 'startingOffsets' or 'startingTimestamp'",
        ),
        ({"stream": "A", "readMethod": "fast"}, r"readMethod.*'consumer' or 'direct'.*'fast'"),
        ({"stream": "A", "subjects": "a b"}, r"'a b' is not a valid subject"),
        (
            {"stream": "A", "maxOffsetsPerTrigger": "5", "maxMessagesPerTrigger": "5"},
            r"either 'maxOffsetsPerTrigger' \(Kafka's name\) or 'maxMessagesPerTrigger'",
        ),
        ({"stream": "A", "maxOffsetsPerTrigger": "0"}, r"'maxOffsetsPerTrigger'.*> 0, got '0'"),
        ({"stream": "A", "minOffsetsPerTrigger": "x"}, r"'minOffsetsPerTrigger'.*integer.*'x'"),
        (
            {"stream": "A", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "900"},
            r"'maxTriggerDelay' needs a unit.*'900'.*milliseconds",
        ),
        (
            {"stream": "A", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"},
            r"'maxTriggerDelay' must be a duration.*'soon'",
        ),
        ({"stream": "A", "maxTriggerDelay": "1m"}, r"'maxTriggerDelay' applies only with"),
        ({"stream": "A", "endingTimestamp": "later"}, r"endingTimestamp.*epoch.*'later'"),
        ({"stream": "A", "endingTimestamp": "-5"}, r"endingTimestamp.*>= 0.*'-5'"),
        (
            {"stream": "A", "endingTimestamp": "1", "endingOffsets": "latest"},
            r"either 'endingOffsets' or 'endingTimestamp'",
        ),
        (
            {"stream": "A", "startingTimestamp": "2000", "endingTimestamp": "1000"},
            r"'endingTimestamp' \(1000 ms\) is before 'startingTimestamp' \(2000 ms\)",
        ),
        (
            {"stream": "A", "startingOffsets": '{"A": {"1": 5}}'},
            r"stream 'A' is one ordered log, Kafka's single partition \"0\".*got partitions '1'",
        ),
        (
            {"stream": "A", "endingOffsets": '{"A": {"0": 5, "1": 7}}'},
            r"endingOffsets.*got partitions '0', '1'",
        ),
        ({"stream": "A", "startingOffsets": '{"A": {"0": 0}}'}, r"sequence >= 1.*got 0"),
    ],
)
def test_invalid_options(options: dict[str, str], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        SourceOptions.from_spark_options({"servers": URL, **options})


def test_secrets_not_in_repr() -> None:
    opts = parse(stream="A", user="u", password="hunter2")
    assert "hunter2" not in repr(opts)


def test_plan_ranges_splits_by_min_partitions_and_size() -> None:
    parts = plan_ranges({"A": (1, 10)}, {"A": True}, 3)
    assert [(p.first, p.last) for p in parts] == [(1, 4), (5, 7), (8, 10)]
    assert all(p.stream == "A" and p.direct for p in parts)
    # No split is bigger than max_size, whatever minPartitions says.
    parts = plan_ranges({"A": (1, 1000)}, {"A": False}, None, max_size=300)
    assert [(p.first, p.last) for p in parts] == [(1, 250), (251, 500), (501, 750), (751, 1000)]
    # Streams share minPartitions by size; empty ranges are dropped; never more splits than rows.
    parts = plan_ranges({"A": (1, 90), "B": (5, 14), "C": (3, 2)}, {"A": 1, "B": 1, "C": 1}, 4)
    per_stream = {s: [(p.first, p.last) for p in parts if p.stream == s] for s in "ABC"}
    assert len(per_stream["A"]) == 4 and len(per_stream["B"]) == 1 and per_stream["C"] == []
    covered = [seq for p in parts if p.stream == "A" for seq in range(p.first, p.last + 1)]
    assert covered == list(range(1, 91))
    assert len(plan_ranges({"A": (7, 8)}, {"A": True}, 10)) == 2


def test_plan_ranges_spreads_over_the_cores_without_min_partitions() -> None:
    """Unset minPartitions: one split per core, none under MIN_AUTO_SPLIT, none over the cap."""

    def sizes(last: int, cores: int, **kwargs: int) -> list[int]:
        parts = plan_ranges({"A": (1, last)}, {"A": False}, None, cores=cores, **kwargs)
        assert [p.first for p in parts] == [1, *(p.last + 1 for p in parts[:-1])]
        assert parts[-1].last == last
        return [p.last - p.first + 1 for p in parts]

    assert sizes(1_000_000, 2) == [500_000, 500_000]
    assert sizes(100_000, 2) == [50_000, 50_000]
    assert sizes(99_999, 2) == [99_999]  # two splits would be under MIN_AUTO_SPLIT
    assert sizes(500, 16) == [500]  # a small micro-batch stays one task
    assert sizes(120_000, 8) == [60_000, 60_000]
    assert sizes(10_000_000, 2) == [MAX_PARTITION_SEQUENCES] * 10
    assert sizes(1_000_000, 2, max_size=300_000) == [250_000] * 4
    # Given minPartitions wins over the core count, in both directions.
    parts = plan_ranges({"A": (1, 1_000_000)}, {"A": False}, 1, cores=8)
    assert len(parts) == 1
    assert len(plan_ranges({"A": (1, 1000)}, {"A": False}, 5, cores=2)) == 5


def test_share_is_bounded_and_makes_progress() -> None:
    assert share({"A": 100, "B": 100}, 50) == {"A": 25, "B": 25}
    assert sum(share({"A": 1000, "B": 10}, 101).values()) <= 101
    assert share({"A": 3, "B": 2}, 1) == {"A": 1, "B": 0}


def _info(
    first: int, last: int, messages: int | None = None, size: int = 0, created: str = "t0"
) -> dict[str, object]:
    count = last - first + 1 if messages is None else messages
    state = {"first_seq": first, "last_seq": last, "messages": count, "bytes": size}
    return {"state": state, "created": created}


def _reader(**extra: str):  # type: ignore[no-untyped-def]
    from oncestream.spark._source import SCHEMA, JetStreamStreamReader

    return JetStreamStreamReader({"servers": URL, "stream": "A,B", **extra}, SCHEMA)


def test_recreated_stream_past_its_end_is_detected() -> None:
    """Offsets without creation times (earlier versions): only a position past the end shows."""
    from oncestream._errors import DataLossError

    strict = _reader()
    infos = {"A": _info(1, 100), "B": _info(1, 5)}
    positions = {"A": 100, "B": 3}
    assert strict._check_reset(positions, positions, {}, infos) == {}
    past = {"A": 100, "B": 40}
    with pytest.raises(DataLossError, match=r"'B'.*read up to sequence 40.*ends at 5"):
        strict._check_reset(past, past, {}, infos)
    with pytest.raises(DataLossError, match=r"'B'.*ends at 5 \(restored from an older"):
        strict._check_reset(past, past, {"A": "t0", "B": "t0"}, infos)  # same creation time
    lenient = _reader(failOnDataLoss="false")
    assert lenient._check_reset(past, past, {}, infos) == {"B": 0}


def test_recreated_stream_grown_past_the_checkpoint_is_detected() -> None:
    """Issue 19: the creation time in the offset tells a re-created stream from the old one."""
    from oncestream._errors import DataLossError

    infos = {"A": _info(1, 100, created="t0"), "B": _info(1, 500, created="t2")}
    positions = {"A": 100, "B": 40}
    with pytest.raises(DataLossError) as err:
        _reader()._check_reset(positions, positions, {"A": "t0", "B": "t1"}, infos)
    text = str(err.value)
    assert "stream 'B' was deleted and re-created" in text
    assert "position 40 is in the stream created t1" in text
    assert "created t2 (sequences 1..500)" in text and "failOnDataLoss=false" in text
    lenient = _reader(failOnDataLoss="false")
    assert lenient._check_reset(positions, positions, {"A": "t0", "B": "t1"}, infos) == {"B": 0}
    # The same stream: nothing to reset.
    assert lenient._check_reset(positions, positions, {"A": "t0", "B": "t2"}, infos) == {}


def test_offset_without_creation_time_is_accepted_warning_once_per_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = _reader()
    infos = {"A": _info(1, 100, created="t0"), "B": _info(1, 5, created="t1")}
    positions = {"A": 50, "B": 5}
    with caplog.at_level("WARNING", logger="oncestream.spark"):
        assert reader._check_reset(positions, positions, {}, infos) == {}
        assert reader._check_reset(positions, positions, {}, infos) == {}
    warned = [r.getMessage() for r in caplog.records if "no creation time" in r.getMessage()]
    assert len(warned) == 2 and "'A'" in warned[0] and "created t0" in warned[0]


def test_offsets_carry_creation_times() -> None:
    from oncestream.spark._offsets import CREATED_KEY, make_offset, split_offset

    infos = {"A": _info(1, 9, created="t0"), "B": {"state": {}}}
    offset = make_offset({"A": 9, "B": 0}, infos)
    assert offset == {"A": 9, "B": 0, "stream.created": {"A": "t0"}}
    assert CREATED_KEY == "stream.created"
    assert split_offset(offset) == ({"A": 9, "B": 0}, {"A": "t0"})
    assert split_offset({"A": 9}) == ({"A": 9}, {})  # an offset of an earlier version


def test_budget_from_limits() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

    from oncestream.spark._source import SCHEMA, JetStreamStreamReader

    reader = JetStreamStreamReader(
        {
            "servers": URL,
            "stream": "A",
            "maxMessagesPerTrigger": "500",
            "maxBytesPerTrigger": "2000",
        },
        SCHEMA,
    )
    infos = {"A": _info(1, 100, size=100 * 100)}  # 100-byte messages on average
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    assert reader._budget(ReadAllAvailable(), infos) is None
    assert reader._budget(ReadMaxRows(500), infos) == 20  # the byte limit is smaller
    assert reader._budget(ReadMaxBytes(10**9), infos) == 500


def test_subject_overlap_and_per_stream_filters() -> None:
    from oncestream.spark._planning import stream_filters, subjects_overlap

    assert subjects_overlap("orders.eu.1", "orders.>")
    assert subjects_overlap("orders.*.1", "orders.eu.*")
    assert subjects_overlap("a.>", "a.b.c")
    assert not subjects_overlap("a.>", "a")
    assert not subjects_overlap("a.b", "a.b.c")
    assert not subjects_overlap("orders.*", "returns.*")
    assert subjects_overlap("*", "x")
    info = {"config": {"subjects": ["orders.>"]}}
    assert stream_filters(("orders.eu", "returns.*"), info) == ("orders.eu",)
    assert stream_filters(("returns.*",), info) == ()
    assert stream_filters(("x.y",), {"config": {}}) == ("x.y",)
