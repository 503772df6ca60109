"""The jetstream sink in batch and streaming queries, against a real server and local Spark."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

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
    # createStream allows fast-ingest batches where the server takes them (issue 40).
    assert asyncio.run(_config(url, "ATOMIC")).get("allow_batched") is True
    write("ATOMIC")  # a re-run inside the 2m window: every batch refused (10201), kept once
    stored = asyncio.run(_read_back(url, "ATOMIC"))
    assert sorted(m.msg_id or "" for m in stored) == sorted(f"a-{i}" for i in range(2500))
    assert all(m.headers["X-Row"] == m.data.decode() for m in stored)
    # Stored as atomic batches of at most atomicBatchSize (the server keeps Nats-Batch-*).
    sizes = Counter(m.headers["Nats-Batch-Id"] for m in stored)
    assert max(sizes.values()) == 300 and sum(sizes.values()) == 2500, sizes


async def _config(url: str, stream: str) -> dict[str, Any]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return dict((await conn.stream_info(stream))["config"])


async def _read_back(url: str, stream: str) -> list[StoredMsg]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return await read_back(conn, stream)


def test_fast_ingest_and_the_ack_path_write_the_same_messages(  # type: ignore[no-untyped-def]
    spark, nats_server: NatsServer, tmp_path: Path
) -> None:
    """The streaming pipeline into a fast-ingest stream (the default where the server takes
    it: lineage ids as Arrow columns, frames built by pyarrow) stores exactly what the
    per-message PubAck path stores into a stream without allow_batched (issue 40)."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="FAST", subjects=("fast.>",)),  # the default: allow_batched on 2.14+
        StreamSpec(name="ACKS", subjects=("acks.>",), allow_batched=False),
    )
    publish_orders(url, "IN", "in.orders", 4000)

    def run(stream: str) -> None:
        source = (
            spark.readStream.format("jetstream")
            .option("servers", url)
            .option("stream", "IN")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", 1500)
            .option("minPartitions", 2)
            .load()
        )
        query = (
            source.select(
                F.lit(f"{stream.lower()}.x").alias("subject"), "data", "stream", "sequence"
            )
            .writeStream.format("jetstream")
            .option("servers", url)
            .option("stream", stream)
            .option("checkpointLocation", str(tmp_path / stream))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120) is not False
        assert query.exception() is None

    run("FAST")
    run("ACKS")
    fast, acks = asyncio.run(_read_back(url, "FAST")), asyncio.run(_read_back(url, "ACKS"))

    def rows(stored: list[StoredMsg], stream: str) -> list[tuple[str | None, str, bytes]]:
        return sorted((m.msg_id, m.subject.replace(stream, "out"), m.data) for m in stored)

    assert len(fast) == 4000 and rows(fast, "fast") == rows(acks, "acks")
    assert rows(acks, "acks")[0][0] == "IN:1"
    # The premise: FAST allows fast-ingest batches by default (the sink's ingest=auto then
    # takes them), ACKS does not; the ack path sends Nats-Expected-Stream with every row.
    # (A fast batch leaves it out once its first message is confirmed: timing-dependent.)
    assert asyncio.run(_config(url, "FAST")).get("allow_batched") is True
    assert not asyncio.run(_config(url, "ACKS")).get("allow_batched")
    assert all(m.headers.get("Nats-Expected-Stream") == "ACKS" for m in acks)
