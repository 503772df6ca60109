"""Through real Spark: the source and the sink refuse unknown options with a suggestion."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.spark._sink_helpers import make_streams


def test_kafka_names_are_refused_with_the_jetstream_name(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="IN", subjects=("in.>",)))

    def reader():  # type: ignore[no-untyped-def]  # a DataFrameReader keeps every option set on it
        return spark.read.format("jetstream").option("servers", url).option("stream", "IN")

    with pytest.raises(
        Exception, match=r"Kafka's 'maxOffsetsPerTrigger'; use 'maxMessagesPerTrigger'"
    ):
        reader().option("maxOffsetsPerTrigger", "10").load().count()
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
