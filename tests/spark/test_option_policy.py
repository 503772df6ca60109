"""Through real Spark: the source and the sink refuse unknown options with a suggestion."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from harness import make_streams
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests._kafka_doc import ROWS


def test_kafka_names_are_refused_with_the_jetstream_name(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="IN", subjects=("in.>",)))

    def reader():  # type: ignore[no-untyped-def]  # a DataFrameReader keeps every option set on it
        return spark.read.format("jetstream").option("servers", url).option("stream", "IN")

    with pytest.raises(
        Exception, match=r"Kafka's 'startingOffsetsByTimestamp'; use 'startingTimestamp'"
    ):
        reader().option("startingOffsetsByTimestamp", "{}").load().count()
    with pytest.raises(Exception, match=r"endingOffsets.*before"):
        reader().option("startingOffsets", '{"IN": 10}').option(
            "endingOffsets", '{"IN": 5}'
        ).load().count()
    df = spark.range(0, 3).select(F.col("id").cast("string").cast("binary").alias("data"))

    def writer():  # type: ignore[no-untyped-def]
        return df.write.format("jetstream").option("servers", url).option("subject", "in.x")

    with pytest.raises(Exception, match=r"'topic'.*use 'stream' / 'subject'"):
        writer().option("topic", "IN").mode("append").save()
    with pytest.raises(Exception, match=r"did you mean 'maxInflight'"):
        writer().option("maxInFlight2", "5").mode("append").save()


def test_kafka_source_options_that_differ(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    """Every refused row of docs/from-kafka.md's "differs" table, through one Spark read.

    The source names every unknown option at once, each with the jetstream
    options its row gives, or "no jetstream counterpart" for a "—" row.
    """
    url = nats_server.url
    make_streams(url, StreamSpec(name="DIFF", subjects=("diff.>",)))
    rows = [r for r in ROWS["source-differs"] if r.kafka and r.jetstream != r.kafka]
    assert len(rows) >= 15
    reader = spark.read.format("jetstream").option("servers", url).option("stream", "DIFF")
    for row in rows:
        reader = reader.option(row.kafka[0], "1")
    with pytest.raises(Exception) as err:
        reader.load().count()
    message = str(err.value).split(". Known options", 1)[0]
    starts = {r.kafka[0]: message.lower().index(f"'{r.kafka[0].lower()}': ") for r in rows}
    ends = sorted([*starts.values(), len(message)])
    for row in rows:
        start = starts[row.kafka[0]]
        hint = message[start : ends[ends.index(start) + 1]]
        assert f"Kafka's '{row.kafka[0]}'" in hint, hint
        if not row.jetstream:
            assert "no jetstream counterpart" in hint, hint
        for name in row.jetstream:
            assert f"'{name}'" in hint, hint
