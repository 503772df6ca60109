"""The jetstream sink in batch and streaming queries, against a real server and local Spark."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from harness import make_streams, publish_orders
from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.integration.test_publisher import StoredMsg, read_back
from tests.spark._sink_helpers import run_audit, stream_state


def test_batch_write_with_msg_id_column(spark_job, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    """A batch write, then the same write again (same ids): nothing is added."""
    url = nats_server.url
    make_streams(url, StreamSpec(name="OUT", subjects=("out.>",)))
    assert spark_job("sink_batch_rerun", url=url) == [5000, 5000]


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
    # Without option 'stream' the sink finds OUT, which captures out.x, and checks its window.
    with pytest.raises(Exception, match="stream 'OUT' has duplicate_window 1s, shorter than"):
        ok.write.format("jetstream").option("servers", url).option("subject", "out.x").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match=r"no stream captures subject 'none\.x'"):
        ok.write.format("jetstream").option("servers", url).option("subject", "none.x").mode(
            "append"
        ).save()
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


def test_without_the_stream_option_rows_of_two_streams_are_refused(spark, nats_server) -> None:  # type: ignore[no-untyped-def]
    """The sink writes to the one stream its rows' subjects belong to, naming ``stream``."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="OUT", subjects=("out.>",)),
        StreamSpec(name="OTHER", subjects=("other.>",)),
    )
    data = [("out.a", "1"), ("other.b", "2")]

    def frame(partitions: int):  # type: ignore[no-untyped-def]
        rdd = spark.sparkContext.parallelize(data, partitions)  # row i in partition i (of 2)
        return spark.createDataFrame(rdd, "subject string, data string")

    writer = frame(1).write.format("jetstream").option("servers", url).mode("append")
    with pytest.raises(Exception, match="StreamMismatch") as one_task:
        writer.save()  # one task: the second row's subject is OTHER's, the server refuses it
    assert "Without option 'stream'" in str(one_task.value)
    assert "stream 'OUT', found from the first row's subject" in str(one_task.value)
    assert stream_state(url, "OTHER")["messages"] == 0
    two_tasks = frame(2).write.format("jetstream").option("servers", url)
    with pytest.raises(Exception, match="wrote to streams 'OTHER', 'OUT'") as err:
        two_tasks.mode("append").save()  # each task found its own stream: refused at commit
    assert "Give option 'stream'" in str(err.value)


def test_streaming_from_jetstream_lineage_ids(
    spark_job, nats_server: NatsServer, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Run to the end, again after 500 more inputs: every input once (classic and Connect)."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",)),
    )
    publish_orders(url, "IN", "in.orders", 3000)
    spark_job("sink_lineage_rerun", url=url, checkpoint=str(tmp_path / "chk"))
    report = run_audit(url, "IN", "stream:OUT", key="lineage")
    assert report.ok, report.to_dict()
    assert report.outputs[0].found == 3500


def test_new_query_on_a_reused_checkpoint_path_writes(  # type: ignore[no-untyped-def]
    spark_job, nats_server: NatsServer, tmp_path: Path
) -> None:
    """Old commit records and position ids must not silence a new query on the same path."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",)),
    )
    publish_orders(url, "IN", "in.orders", 600)
    sizes = spark_job("sink_reused_checkpoint", url=url, checkpoint=str(tmp_path / "chk"))
    assert sizes == [600, 1200]


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
