"""One trace per record: Publisher -> Spark (source, sink) -> Processor (real SDK, real Spark).

The Spark source shows each record's ``traceparent`` in its ``headers`` column;
the ``jetstream`` sink writes the column back unchanged, so the Processor's
span on the target stream is a child of the producer's span.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry.trace import SpanKind
from pyspark.sql import functions as F

from harness import make_streams
from oncestream import (
    ConnectOptions,
    Processor,
    ProcessorOptions,
    Publisher,
    PublisherOptions,
    SQLiteLedger,
    connect,
)
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from oncestream.tracing._otel import OUTCOME
from tests._tracing import span_exporter
from tests.handlers import record

COUNT = 5


async def _publish(url: str, tracing: bool) -> None:
    conn = await connect(ConnectOptions(servers=(url,)))
    async with conn, Publisher(conn, PublisherOptions(stream="SRC", tracing=tracing)) as pub:
        futures = [await pub.publish("src.x", b"%d" % n, msg_id=f"r-{n}") for n in range(COUNT)]
        await asyncio.gather(*futures)


async def _process(url: str, db: Path) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        opts = ProcessorOptions(batch=10, tracing=True, prune_interval=0)
        proc = Processor(conn, "DST", "w", record, ledger=SQLiteLedger(db), options=opts)
        task = asyncio.create_task(proc.run())
        await proc.wait_until(lambda s: s.applied == COUNT)
        await proc.stop()
        await task


def _through_spark(spark, url: str) -> list:  # type: ignore[no-untyped-def,type-arg]
    rows = (
        spark.read.format("jetstream").option("servers", url).option("stream", "SRC")
        .option("includeHeaders", "true").load()
    )  # fmt: skip
    rows.select(
        F.regexp_replace("subject", "^src", "dst").alias("subject"), "data", "headers", "msg_id"
    ).write.format("jetstream").option("servers", url).option("stream", "DST").mode("append").save()
    return rows.orderBy("sequence").collect()


def test_a_records_trace_spans_publisher_spark_and_processor(
    spark, nats_server: NatsServer, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="SRC", subjects=("src.>",)),
                 StreamSpec(name="DST", subjects=("dst.>",)))  # fmt: skip
    exporter = span_exporter()
    asyncio.run(_publish(url, tracing=True))
    read = _through_spark(spark, url)
    # The source's headers column carries each record's context.
    assert all(len(r.headers["traceparent"]) == 1 for r in read)
    asyncio.run(_process(url, tmp_path / "l.db"))

    spans = exporter.get_finished_spans()
    producers = {
        s.attributes["messaging.message.id"]: s for s in spans if s.kind == SpanKind.PRODUCER
    }
    consumers = {
        s.attributes["messaging.message.id"]: s for s in spans if s.kind == SpanKind.CONSUMER
    }
    assert sorted(producers) == sorted(consumers) == [f"r-{n}" for n in range(COUNT)]
    for msg_id, consumer in consumers.items():
        producer = producers[msg_id]
        assert consumer.context.trace_id == producer.context.trace_id
        assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
        assert consumer.attributes[OUTCOME] == "applied"
        assert consumer.attributes["messaging.nats.stream"] == "DST"
    assert len({s.context.trace_id for s in producers.values()}) == COUNT


def test_with_tracing_off_no_traceparent_reaches_spark(spark, nats_server: NatsServer) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    make_streams(url, StreamSpec(name="SRC", subjects=("src.>",)),
                 StreamSpec(name="DST", subjects=("dst.>",)))  # fmt: skip
    asyncio.run(_publish(url, tracing=False))
    read = _through_spark(spark, url)
    assert len(read) == COUNT
    assert all(r.headers is None or "traceparent" not in r.headers for r in read)
