"""Headers and msg ids survive read -> write -> read through the jetstream source and sink.

What a reader sees (docs/spark-source.md, "Headers"): the message's own
headers in ``headers``, the id in ``msg_id``; the write-time control headers
(``Nats-Expected-*``, ``Nats-Batch-*``) that every oncestream write carries are
hidden. What the sink accepts (docs/spark-sink.md): the same columns back, so
a read's rows can be written as they are; control headers in ``headers`` are
refused with a message naming the column to use.
"""

from __future__ import annotations

import asyncio

import pytest
from pyspark.sql import functions as F

from harness import make_streams
from oncestream import ConnectOptions, Publisher, PublisherOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.spark._sink_helpers import stream_state

# Clean ids (see _headers.check_msg_id) with spaces inside, non-ASCII, a zero-width space.
IDS = ["a b", "é", "e\u0301", "日本-1", "x\u200by", "k:1/2#3?4@5"]


def _publish(url: str) -> None:
    async def run() -> None:
        conn = await connect(ConnectOptions(servers=(url,)))
        async with conn, Publisher(conn, PublisherOptions(stream="SRC")) as pub:
            for n, msg_id in enumerate(IDS):
                headers = {"X-Trace": ["t1", "t2"], "X-N": str(n)}
                await pub.publish(f"src.{n}", b"d%d" % n, msg_id=msg_id, headers=headers)

    asyncio.run(run())


def _read(spark, url: str, stream: str):  # type: ignore[no-untyped-def]
    return (
        spark.read.format("jetstream")
        .option("servers", url)
        .option("stream", stream)
        .option("includeHeaders", "true")
        .load()
        .orderBy("sequence")
    )


def test_read_write_read_keeps_ids_headers_and_data(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="SRC", subjects=("src.>",)),
        StreamSpec(name="DST", subjects=("dst.>",)),
    )
    _publish(url)
    first = _read(spark, url, "SRC").collect()
    assert [r.msg_id for r in first] == IDS
    for n, row in enumerate(first):
        # Every message carries Nats-Expected-Stream on the wire; readers do not see it.
        assert dict(row.headers) == {"X-Trace": ["t1", "t2"], "X-N": [str(n)]}

    rows = _read(spark, url, "SRC").select(
        F.regexp_replace("subject", "^src", "dst").alias("subject"), "data", "headers", "msg_id"
    )
    for _ in range(2):  # the second write is a re-run: every id is a duplicate
        rows.write.format("jetstream").option("servers", url).option("stream", "DST").mode(
            "append"
        ).save()
    assert stream_state(url, "DST")["messages"] == len(IDS)

    second = _read(spark, url, "DST").collect()
    assert [r.msg_id for r in second] == IDS
    assert [dict(r.headers) for r in second] == [dict(r.headers) for r in first]
    assert [r.data for r in second] == [r.data for r in first]


def test_control_headers_in_the_headers_column_are_refused(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="DST", subjects=("dst.>",)))
    for name, fragment in (
        ("Nats-Msg-Id", "msg_id column"),
        ("Nats-Expected-Stream", "write-time checks"),
        ("nats-batch-id", "write-time checks"),
    ):
        df = spark.range(2).select(
            F.lit("dst.x").alias("subject"),
            F.col("id").cast("string").alias("data"),
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("msg_id"),
            F.create_map(F.lit(name), F.array(F.lit("v"))).alias("headers"),
        )
        with pytest.raises(Exception, match=fragment):
            df.write.format("jetstream").option("servers", url).option("stream", "DST").mode(
                "append"
            ).save()
    assert stream_state(url, "DST")["messages"] == 0


def test_msg_ids_that_would_be_read_differently_are_refused(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="DST", subjects=("dst.>",)))
    for bad in (" a", "a ", "a\tb", ""):
        df = spark.createDataFrame(
            [("dst.x", "d", bad)], "subject string, data string, msg_id string"
        )
        with pytest.raises(Exception, match="msg_id of row 0"):
            df.write.format("jetstream").option("servers", url).option("stream", "DST").mode(
                "append"
            ).save()
    assert stream_state(url, "DST")["messages"] == 0
