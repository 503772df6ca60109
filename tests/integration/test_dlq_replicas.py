"""The dead-letter stream a Processor creates has as many replicas as the stream it
consumes, on a 3-node cluster on loopback (before: 1, and losing that node lost the
dead letters); a dead-letter stream the user created is used as it is."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js.errors import NoStreamResponseError

from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger, connect
from oncestream.server import Cluster
from oncestream.streams import StreamSpec, ensure_stream
from tests.handlers import always_fails


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    topology = Cluster(tmp_path / "cluster", size=3, sync_interval=None)
    topology.up()
    try:
        yield topology
    finally:
        topology.down()


async def _publish_once_led(conn: Connection, subject: str, data: bytes) -> None:
    """Publish to a replicated stream just created: until its leader is elected the
    server has no responder for the subject (a bounded poll: no event says "elected")."""
    for _ in range(100):
        try:
            await conn.nc.jetstream().publish(subject, data)
            return
        except NoStreamResponseError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"no stream answered on {subject} for 10 s")


async def _dead_letter_one(conn: Connection, stream: str, dlq: str, db: Path) -> None:
    """A Processor on ``stream`` dead-letters its one message to ``dlq``."""
    options = ProcessorOptions(max_deliver=1, backoff=(0.1,), dead_letter_stream=dlq)
    processor = Processor(conn, stream, "w", always_fails, ledger=SQLiteLedger(db), options=options)
    task = asyncio.create_task(processor.run())
    try:
        await processor.wait_until(lambda s: s.dead_lettered >= 1, 30)
    finally:
        await processor.stop()
        await task


async def test_the_dead_letter_stream_has_the_replicas_of_the_consumed_stream(
    cluster: Cluster, tmp_path: Path
) -> None:
    async with await connect(cluster.options()) as conn:
        await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",), replicas=3))
        await _publish_once_led(conn, "orders.eu", b"1")
        await _dead_letter_one(conn, "ORDERS", "ORDERS_DLQ", tmp_path / "a.db")
        info = await conn.stream_info("ORDERS_DLQ")
        assert info["config"]["num_replicas"] == 3
        assert info["state"]["messages"] == 1
        assert len(info["cluster"].get("replicas") or ()) == 2  # a leader and two followers

        # Created by the user with one replica: used, never changed.
        await ensure_stream(conn, StreamSpec(name="MINE", subjects=("MINE.>",), replicas=1))
        await ensure_stream(conn, StreamSpec(name="PAYS", subjects=("pays.>",), replicas=3))
        await _publish_once_led(conn, "pays.eu", b"2")
        await _dead_letter_one(conn, "PAYS", "MINE", tmp_path / "b.db")
        mine = await conn.stream_info("MINE")
        assert mine["config"]["num_replicas"] == 1 and mine["state"]["messages"] == 1
