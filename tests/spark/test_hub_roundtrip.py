"""Rows read from a hub's aggregate stream are written on as they are (issue 37, item 2).

The edge-to-hub topology (oncestream.server.HubLeaf): records published at the
leaf, with tracing on, reach the hub's ``aggregate`` stream, which sources the
leaf's ``test`` across domains; the server stamps each with
``Nats-Stream-Source``. A Spark batch read of ``aggregate`` with
``includeHeaders=true`` (the ``traceparent`` tracing needs) writes its rows
through the ``jetstream`` sink into ``DST`` at the hub, and a Processor applies
them. nats-server refuses ``Nats-Stream-Source`` from a client (10227), so
before the writers left the headers the server stamps out (``_headers``),
every publish of the sink failed. Now every record is stored and applied once,
with one trace per record from the leaf's producer to the hub's Processor.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind

from oncestream import Processor, ProcessorOptions, Publisher, PublisherOptions, SQLiteLedger
from oncestream import connect as nats_connect
from oncestream.server import HubLeaf
from oncestream.streams import StreamSpec, ensure_stream, get_message
from oncestream.tracing._otel import OUTCOME
from tests._scenario import assert_exactly_once, stream_ids, wait_messages
from tests._tracing import span_exporter
from tests.handlers import record

pytestmark = pytest.mark.timeout(240)

COUNT = 40


async def _publish_at_leaf(topo: HubLeaf) -> None:
    await topo.create_walkthrough_streams()
    async with await nats_connect(topo.options("hub")) as hub:
        await ensure_stream(hub, StreamSpec(name="DST", subjects=("dst.>",)))
    leaf = await nats_connect(topo.options("leaf"))
    async with leaf, Publisher(leaf, PublisherOptions(stream="test", tracing=True)) as pub:
        acks = [await pub.publish("test.x", b"%d" % n, msg_id=f"r-{n}") for n in range(COUNT)]
        await asyncio.gather(*acks)
    async with await nats_connect(topo.options("hub")) as hub:
        await wait_messages(hub, "aggregate", COUNT, timeout=60)


async def _process(topo: HubLeaf, db: Path) -> None:
    async with await nats_connect(topo.options("hub")) as conn:
        opts = ProcessorOptions(batch=10, tracing=True, prune_interval=0)
        proc = Processor(conn, "DST", "w", record, ledger=SQLiteLedger(db), options=opts)
        task = asyncio.create_task(proc.run())
        await proc.wait_until(lambda s: s.applied == COUNT)
        await proc.stop()
        await task


def test_hub_aggregate_rows_through_the_sink_once_with_one_trace_each(
    spark, topo: HubLeaf, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    exporter = span_exporter()
    asyncio.run(_publish_at_leaf(topo))
    user, password = topo.credentials("ACC")
    auth = {"servers": topo.url("hub"), "user": user, "password": password, "domain": "hub"}
    rows = (
        spark.read.format("jetstream").options(**auth).option("stream", "aggregate")
        .option("includeHeaders", "true").load()
    )  # fmt: skip
    read = rows.orderBy("sequence").collect()
    # The server's stamp is readable, and so is each record's trace context.
    assert all(r.headers["Nats-Stream-Source"][0].startswith("test") for r in read), read[0]
    assert all(len(r.headers["traceparent"]) == 1 for r in read)
    rows.selectExpr("'dst.x' AS subject", "data", "headers", "msg_id").write.format(
        "jetstream"
    ).options(**auth).option("stream", "DST").mode("append").save()

    async def stored() -> tuple[list[str | None], dict[str, list[str]]]:
        async with await nats_connect(topo.options("hub")) as hub:
            first = await get_message(hub, "DST", seq=1)
            return await stream_ids(hub, "DST"), first.headers

    ids, headers = asyncio.run(stored())
    expected = [f"r-{n}" for n in range(COUNT)]
    assert_exactly_once(ids, expected)
    assert "Nats-Stream-Source" not in headers and "traceparent" in headers, headers
    asyncio.run(_process(topo, tmp_path / "l.db"))
    with sqlite3.connect(tmp_path / "l.db") as db:
        applied = sorted(n for (n,) in db.execute("SELECT id FROM effects"))
    assert applied == list(range(COUNT))

    spans = exporter.get_finished_spans()
    producers = {
        s.attributes["messaging.message.id"]: s for s in spans if s.kind == SpanKind.PRODUCER
    }
    consumers = [s for s in spans if s.kind == SpanKind.CONSUMER]
    assert sorted(producers) == sorted(expected)
    assert sorted(s.attributes["messaging.message.id"] for s in consumers) == sorted(expected)
    for consumer in consumers:
        producer = producers[consumer.attributes["messaging.message.id"]]
        assert consumer.context.trace_id == producer.context.trace_id
        assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
        assert consumer.attributes[OUTCOME] == "applied"
    assert len({s.context.trace_id for s in producers.values()}) == COUNT
