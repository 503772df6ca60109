"""The jetstream sink in batch and streaming queries, against a real server and local Spark."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.integration.test_publisher import StoredMsg, read_back
from tests.spark._sink_helpers import make_streams, publish_orders, run_audit, stream_state


def test_batch_write_with_msg_id_column(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="OUT", subjects=("out.>",)))
    df = spark.range(0, 5000, numPartitions=3).select(
        F.concat(F.lit("out."), (F.col("id") % 4).cast("string")).alias("subject"),
        F.col("id").cast("string").alias("data"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("msg_id"),
        F.create_map(F.lit("X-Row"), F.col("id").cast("string")).alias("headers"),
    )
    writer = df.write.format("jetstream").option("servers", url).option("stream", "OUT")
    writer.mode("append").save()
    assert stream_state(url, "OUT")["messages"] == 5000
    writer.mode("append").save()  # a re-run: same ids, all dropped by the server
    assert stream_state(url, "OUT")["messages"] == 5000


def test_batch_write_without_ids_is_deterministic(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="OUT", subjects=("out.>",)))
    df = spark.range(0, 1000, numPartitions=2).select(
        F.col("id").cast("string").cast("binary").alias("data")
    )
    for _ in range(2):
        df.write.format("jetstream").option("servers", url).option("subject", "out.x").option(
            "stream", "OUT"
        ).mode("append").save()
    assert stream_state(url, "OUT")["messages"] == 1000


def test_schema_and_options_are_checked_on_the_driver(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=1.0),
        StreamSpec(name="OTHER", subjects=("other.>",)),
    )
    bad = spark.range(3).select(F.col("id").alias("data"))
    with pytest.raises(Exception, match="column 'data' must be binary or string") as err:
        bad.write.format("jetstream").option("servers", url).mode("append").save()
    assert "missing column 'subject'" in str(err.value)
    ok = spark.range(3).select(F.col("id").cast("string").alias("data"))
    with pytest.raises(Exception, match="duplicate_window 1s, shorter than"):
        ok.write.format("jetstream").option("servers", url).option("stream", "OUT").option(
            "subject", "out.x"
        ).mode("append").save()
    with pytest.raises(Exception, match="StreamNotFound"):
        ok.write.format("jetstream").option("servers", url).option("stream", "MISSING").option(
            "subject", "out.x"
        ).mode("append").save()
    with pytest.raises(Exception, match="10060"):  # out.x is captured by OUT, not OTHER
        ok.write.format("jetstream").option("servers", url).option("stream", "OTHER").option(
            "subject", "out.x"
        ).mode("append").save()
    assert stream_state(url, "OTHER")["messages"] == 0
    # createStream with subjects another stream captures: that stream is named (issue 19).
    with pytest.raises(Exception, match="createStreamSubjects") as err:
        ok.write.format("jetstream").option("servers", url).option("stream", "NEW").option(
            "subject", "out.eu.x"
        ).option("createStream", "true").option("createStreamSubjects", "out.eu.>").mode(
            "append"
        ).save()
    last = str(err.value).strip().splitlines()[-2]  # Spark appends its SQLSTATE line
    assert "ConfigError: option 'createStreamSubjects': cannot create stream 'NEW'" in last
    assert "stream 'OUT' captures out.>" in last and "Write to 'OUT'" in last


def test_streaming_from_jetstream_lineage_ids(
    spark, nats_server: NatsServer, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",)),
    )
    publish_orders(url, "IN", "in.orders", 3000)

    def run() -> None:
        source = (
            spark.readStream.format("jetstream")
            .option("servers", url)
            .option("stream", "IN")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", 1000)
            .load()
        )
        out = source.select(
            F.lit("out.orders").alias("subject"), "data", "headers", "stream", "sequence"
        )
        query = (
            out.writeStream.format("jetstream")
            .option("servers", url)
            .option("stream", "OUT")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120) is not False
        assert query.exception() is None

    run()
    publish_orders(url, "IN", "in.orders", 500, start=3000)
    run()
    report = run_audit(url, "IN", "stream:OUT", key="lineage")
    assert report.ok, report.to_dict()
    assert report.outputs[0].found == 3500


def test_new_query_on_a_reused_checkpoint_path_writes(  # type: ignore[no-untyped-def]
    spark, nats_server: NatsServer, tmp_path: Path
) -> None:
    """Old commit records and position ids must not silence a new query on the same path."""
    import shutil

    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",)),
    )
    publish_orders(url, "IN", "in.orders", 600)
    checkpoint = tmp_path / "chk"

    def run() -> None:
        source = (
            spark.readStream.format("jetstream")
            .option("servers", url)
            .option("stream", "IN")
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            source.select(F.lit("out.orders").alias("subject"), "data")  # position ids
            .writeStream.format("jetstream")
            .option("servers", url)
            .option("stream", "OUT")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120) is not False
        assert query.exception() is None

    run()
    assert stream_state(url, "OUT")["messages"] == 600
    shutil.rmtree(checkpoint)  # the user starts over: a new query id, batch ids from 0
    run()
    assert stream_state(url, "OUT")["messages"] == 1200


def test_atomic_ingest_needs_allow_atomic_and_writes_whole_batches(  # type: ignore[no-untyped-def]
    spark, nats_server: NatsServer
) -> None:
    """ingest=atomic: refused on the driver without allow_atomic; with it, each row once."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="PLAIN", subjects=("plain.>",), duplicate_window=1.0),
        StreamSpec(name="SMALL", subjects=("small.>",), allow_atomic=True),
    )
    df = spark.range(0, 2500, numPartitions=2).select(
        F.concat(F.lit("atomic."), (F.col("id") % 3).cast("string")).alias("subject"),
        F.col("id").cast("string").alias("data"),
        F.concat(F.lit("a-"), F.col("id").cast("string")).alias("msg_id"),
        F.create_map(F.lit("X-Row"), F.col("id").cast("string")).alias("headers"),
    )

    def write(stream: str, **options: str) -> None:
        writer = df.write.format("jetstream").option("servers", url).option("stream", stream)
        for key, value in {"ingest": "atomic", **options}.items():
            writer = writer.option(key, value)
        writer.mode("append").save()

    # A 1 s window is no ConfigError with ingest=atomic (no re-send depends on it);
    # a stream without allow_atomic is, before any task runs.
    with pytest.raises(Exception, match="ingest=atomic") as err:
        write("PLAIN")
    last = str(err.value).strip().splitlines()[-2]  # Spark appends its SQLSTATE line
    assert "ConfigError: the jetstream sink's ingest=atomic needs atomic batch publish" in last
    assert "stream 'PLAIN' does not set allow_atomic" in last
    assert "`oncestream stream edit PLAIN --allow-atomic`" in last and "ingest=auto" in last
    assert stream_state(url, "PLAIN")["messages"] == 0
    created = {"createStream": "true", "createStreamSubjects": "atomic.>"}
    with pytest.raises(Exception, match="createStreamAllowAtomic=true"):
        write("MADE", createStream="true", createStreamSubjects="made.>")
    with pytest.raises(Exception, match=r"'atomicBatchSize' must be 1\.\.1000.*got 1001"):
        write("SMALL", atomicBatchSize="1001")

    write("ATOMIC", **created, createStreamAllowAtomic="true", atomicBatchSize="300")
    write("ATOMIC")  # a re-run inside the 2m window: every batch refused (10201), kept once
    stored = asyncio.run(_read_back(url, "ATOMIC"))
    assert sorted(m.msg_id or "" for m in stored) == sorted(f"a-{i}" for i in range(2500))
    assert all(m.headers["X-Row"] == m.data.decode() for m in stored)
    # Stored as atomic batches of at most atomicBatchSize (the server keeps Nats-Batch-*).
    sizes = Counter(m.headers["Nats-Batch-Id"] for m in stored)
    assert max(sizes.values()) == 300 and sum(sizes.values()) == 2500, sizes


def test_atomic_ingest_writing_the_same_dataframe_twice_stores_each_row_once(  # type: ignore[no-untyped-def]
    spark, nats_server: NatsServer
) -> None:
    """Issue 38: 20,000 rows with ingest=atomic, written again at once inside a 30 s window.

    The second write's batches are all refused (10201) for ids its tasks did not
    store. Shown failing before the stream was searched for them (one row per
    batch, a few hundred rows a second, past the window: rows stored twice).
    """
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=30.0, allow_atomic=True),
    )
    df = spark.range(0, 20_000, numPartitions=2).select(
        F.concat(F.lit("out."), (F.col("id") % 3).cast("string")).alias("subject"),
        F.col("id").cast("string").alias("data"),
    )
    for _ in range(2):  # position ids: the same rows get the same ids
        df.write.format("jetstream").option("servers", url).option("stream", "OUT").option(
            "ingest", "atomic"
        ).mode("append").save()
    counts = Counter(m.msg_id for m in asyncio.run(_read_back(url, "OUT")))
    twice = sorted(str(k) for k, n in counts.items() if n > 1)
    assert (len(counts), sum(counts.values()), len(twice)) == (20_000, 20_000, 0), twice[:5]


async def _read_back(url: str, stream: str) -> list[StoredMsg]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return await read_back(conn, stream)
