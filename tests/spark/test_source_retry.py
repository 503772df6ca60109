"""The source's retry policy against a real server: a paused server is ridden out, a
missing stream still fails at once, and a spent budget fails with the last error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest

from oncestream._connection import Connection
from oncestream._errors import OperationTimeout, StreamNotFound
from oncestream._options import ConnectOptions
from oncestream._retry import Unavailable
from oncestream.server import NatsServer
from oncestream.spark._planning import stream_infos
from oncestream.spark._reader import (
    ARROW_SCHEMA,
    close_connections,
    source_connection,
)
from oncestream.spark._reader import PartitionReader as RangeReader
from oncestream.spark._source_options import SourceOptions
from oncestream.streams import delete_stream
from tests.spark._helpers import publish

# Short request timeouts so a paused server is noticed quickly; the budget is ample.
IDLE = 0.4


@pytest.fixture
async def fast_conn(options: ConnectOptions) -> AsyncIterator[Connection]:
    yield await source_connection(options.replace(request_timeout=IDLE))
    await close_connections()


async def _drain(reader: RangeReader, batches: list[pa.RecordBatch], limit: int = 1000) -> None:
    try:
        for _ in range(limit):
            batch = await reader.next_batch()
            if batch is None:
                return
            batches.append(batch)
        raise AssertionError("the reader did not finish")
    finally:
        await reader.close()


async def _wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _rows(batches: list[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    columns = ("sequence", "subject", "timestamp", "msg_id", "data")
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


@pytest.mark.parametrize("direct", [False, True])
async def test_range_read_rides_out_a_paused_server(
    direct: bool,
    nats_server: NatsServer,
    fast_conn: Connection,
    conn: Connection,
    make_stream: Any,
) -> None:
    await make_stream("RP", ("rp.>",))
    await publish(conn, "rp.x", 1200, headers=True)
    first, last = 5, 1190
    reference: list[pa.RecordBatch] = []
    await _drain(RangeReader(fast_conn, "RP", first, last, (), direct=direct, batch=100), reference)

    reader = RangeReader(fast_conn, "RP", first, last, (), direct=direct, batch=100)
    batches = [b for b in [await reader.next_batch(), await reader.next_batch()] if b is not None]
    nats_server.pause()
    try:
        rest = asyncio.ensure_future(_drain(reader, batches))
        # Resume only once the reader has noticed the silence and started over.
        await _wait_until(lambda: reader.retries >= 2 or rest.done(), 20, "a retry")
    finally:
        nats_server.resume()
    await asyncio.wait_for(rest, 30)

    assert reader.retries >= 2
    rows = _rows(batches)
    # Identical rows: nothing lost, nothing twice, in order, same content.
    assert rows == _rows(reference)
    assert [r[0] for r in rows] == list(range(first, last + 1))


async def test_spent_budget_fails_with_the_last_error(
    nats_server: NatsServer, fast_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RB", ("rb.>",))
    await publish(conn, "rb.x", 300)
    reader = RangeReader(fast_conn, "RB", 1, 300, (), direct=False, batch=50, retry_timeout=1.0)
    assert await reader.next_batch() is not None
    nats_server.pause()
    try:
        start = time.monotonic()
        with pytest.raises(OperationTimeout) as caught:
            for _ in range(10):
                await reader.next_batch()
        elapsed = time.monotonic() - start
    finally:
        nats_server.resume()
    assert any("retryTimeout" in note for note in getattr(caught.value, "__notes__", []))
    assert 1.0 <= elapsed < 1.0 + 3 * IDLE + 1.0, elapsed


@pytest.mark.parametrize("direct", [False, True])
async def test_missing_stream_fails_fast(
    direct: bool, fast_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    # Consumer path: CONSUMER.CREATE answers 10059. Direct get: 503 (no responders),
    # then STREAM.INFO answers 10059, so the 30 s budget is not waited out.
    start = time.monotonic()
    with pytest.raises(StreamNotFound):
        await _drain(RangeReader(fast_conn, "NOPE", 1, 10, (), direct=direct), [])
    assert time.monotonic() - start < 2.0

    # A stream deleted during the read: its consumer vanishes (503) or direct get
    # finds no stream; either way the read fails at once, not after the budget.
    await make_stream("RD", ("rd.>",))
    await publish(conn, "rd.x", 400)
    reader = RangeReader(fast_conn, "RD", 1, 400, (), direct=direct, batch=50)
    assert await reader.next_batch() is not None
    await delete_stream(conn, "RD")
    start = time.monotonic()
    with pytest.raises(StreamNotFound):
        await _drain(reader, [])
    assert time.monotonic() - start < 2.0


async def test_planning_rides_out_a_paused_server_and_fails_fast_on_a_missing_stream(
    nats_server: NatsServer, fast_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RI", ("ri.>",))
    await publish(conn, "ri.x", 10)
    opts = SourceOptions.from_spark_options(
        {"servers": nats_server.url, "stream": "RI", "retryTimeout": "20s"}
    )
    nats_server.pause()
    try:
        planning = asyncio.ensure_future(stream_infos(fast_conn, opts))
        # Paused past several request timeouts: the driver keeps asking.
        done, _ = await asyncio.wait({planning}, timeout=3 * IDLE)
        assert not done
    finally:
        nats_server.resume()
    infos = await asyncio.wait_for(planning, 20)
    assert infos["RI"]["state"]["last_seq"] == 10

    missing = SourceOptions.from_spark_options(
        {"servers": nats_server.url, "stream": "RI,NOPE", "retryTimeout": "30s"}
    )
    start = time.monotonic()
    with pytest.raises(StreamNotFound, match="'NOPE' does not exist"):
        await stream_infos(fast_conn, missing)
    assert time.monotonic() - start < 2.0


async def test_replicated_range_asks_the_leader_before_ending_early(
    fast_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RL", ("rl.>",))
    for i in range(20):
        await publish(conn, f"rl.{'a' if i < 10 else 'b'}", 1, start=i)
    # A filtered range whose tail has no match ends normally after the leader confirms.
    table: list[pa.RecordBatch] = []
    reader = RangeReader(fast_conn, "RL", 1, 20, ("rl.a",), direct=False, replicated=True)
    await _drain(reader, table)
    assert [r[0] for r in _rows(table)] == list(range(1, 11))
    # A replica that ran dry before the leader's last matching message (a follower
    # behind the leader) is reported as transient, so the read is retried.
    lagging = RangeReader(fast_conn, "RL", 1, 20, ("rl.b",), direct=True, replicated=True)
    lagging._next_seq = 15
    with pytest.raises(Unavailable, match="has not applied sequence 15"):
        await lagging._confirm_end()
    lagging._next_seq = 21
    await lagging._confirm_end()
    await lagging.close()
