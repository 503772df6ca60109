"""Publisher under faults: a paused server (acks time out) and a SIGKILLed, restarted one.

Each runs on both ingest paths: pipelined acks, and fast-ingest batches
(``ingest="fast"`` on a stream with ``allow_batched``; it refuses to start
rather than fall back, so the fast variant cannot silently test the other).
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from oncestream import Connection
from oncestream.publish import AckTally, Publisher, PublisherOptions
from oncestream.server import NatsServer
from tests.integration.test_publisher import assert_exactly_once, pause_server, read_back


async def _until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """Await ``condition()`` becoming true, checking every 10 ms for at most ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


INGEST = pytest.mark.parametrize("ingest", ["acks", "fast"])


@INGEST
async def test_paused_server_retries_report_duplicates_and_store_once(
    nats_server: NatsServer, conn: Connection, make_stream, ingest: str
) -> None:
    await make_stream("PAUSE", ("pause.>",), duplicate_window=60, allow_batched=ingest == "fast")
    opts = PublisherOptions(
        stream="PAUSE", ack_timeout=0.3, max_attempts=20, retry_backoff=(0.05,), ingest=ingest
    )
    ids = [f"p{i}" for i in range(400)]
    async with Publisher(conn, opts) as pub:
        for msg_id in ids[:200]:
            await pub.publish("pause.x", msg_id.encode(), msg_id=msg_id)
        await pub.flush()
        pause_server(nats_server)
        try:
            for msg_id in ids[200:]:
                await pub.publish("pause.x", msg_id.encode(), msg_id=msg_id)
            await _until(lambda: pub.stats.retried >= 200, 10, "every paused publish re-sent")
        finally:
            nats_server.resume()
        await pub.flush(timeout=30)
        # The originals are acked first; the acks of their re-sent copies follow and
        # report duplicates (the server kept only the original).
        await _until(lambda: pub.stats.duplicates >= 200, 10, "duplicate acks of the copies")
    stats = pub.stats
    assert stats.failed == 0 and stats.acked == 400
    assert stats.retried >= 200
    assert_exactly_once(await read_back(conn, "PAUSE"), set(ids))


async def _publish_through_kills(
    server: NatsServer,
    conn: Connection,
    make_stream,
    *,
    total: int,
    kills: int,
    ingest: str = "acks",
    bulk: str | None = None,
) -> None:
    await make_stream("CRASH", ("crash.>",), duplicate_window=120, allow_batched=ingest == "fast")
    opts = PublisherOptions(
        stream="CRASH",
        ack_timeout=1.0,
        max_attempts=12,
        retry_backoff=(0.05, 0.25, 1.0),
        ingest=ingest,
    )
    ids = [f"k{i}" for i in range(total)]
    tally = AckTally()
    async with Publisher(conn, opts) as pub:

        async def produce() -> None:
            for start in range(0, total, 500) if bulk else ():
                chunk = ids[start : start + 500]
                if bulk == "columns":  # Arrow columns: runs of frames, no Pending each
                    await pub.publish_columns(
                        f"crash.{start % 4}",
                        pa.array([b"x" * 128] * len(chunk)),
                        pa.array(chunk),
                        tally=tally,
                    )
                else:
                    await pub.publish_many(
                        [f"crash.{start % 4}"] * len(chunk),
                        [b"x" * 128] * len(chunk),
                        chunk,
                        tally=tally,
                    )
            if bulk:
                return
            for i, msg_id in enumerate(ids):
                await pub.publish(f"crash.{i % 4}", b"x" * 128, msg_id=msg_id)

        producer = asyncio.create_task(produce())
        try:
            for k in range(1, kills + 1):
                mark = total * k // (kills + 1)
                await _until(lambda m=mark: pub.stats.acked >= m, 60, f"{mark} acks")  # type: ignore[misc]
                reconnects = conn.reconnects
                server.kill()
                server.restart()
                await _until(lambda r=reconnects: conn.reconnects > r, 30, "the reconnect")  # type: ignore[misc]
            await asyncio.wait_for(producer, 120)
        finally:
            producer.cancel()
        await pub.flush(timeout=120)
    assert pub.stats.failed == 0
    assert pub.stats.acked == total
    # Messages in flight at each kill were re-sent after the reconnect.
    assert pub.stats.retried > 0
    if bulk:
        assert tally.errors == [] and tally.stored + tally.duplicates == total
    assert_exactly_once(await read_back(conn, "CRASH"), set(ids))


@INGEST
async def test_sigkill_restart_mid_publish_stores_every_id_once(
    nats_server: NatsServer, conn: Connection, make_stream, ingest: str
) -> None:
    await _publish_through_kills(
        nats_server, conn, make_stream, total=20_000, kills=1, ingest=ingest
    )


@pytest.mark.parametrize("bulk", ["many", "columns"])
async def test_sigkill_restart_mid_bulk_publish_stores_every_id_once(
    nats_server: NatsServer, conn: Connection, make_stream, bulk: str
) -> None:
    """publish_many and publish_columns (runs of frames) on the fast path, through a restart.

    After the reconnect no batch opens for ack_timeout: the rest of a call goes on the
    ack path (publish_many once recursed into itself there until RecursionError).
    """
    await _publish_through_kills(
        nats_server, conn, make_stream, total=20_000, kills=1, ingest="fast", bulk=bulk
    )


@pytest.mark.soak
@pytest.mark.timeout(900)
@INGEST
async def test_soak_repeated_sigkill_during_publish(
    nats_server: NatsServer, conn: Connection, make_stream, ingest: str
) -> None:
    await _publish_through_kills(
        nats_server, conn, make_stream, total=300_000, kills=5, ingest=ingest
    )


@pytest.mark.parametrize("batch_size", [1, 200])
async def test_producer_session_survives_sigkill_restart(
    nats_server: NatsServer, conn: Connection, make_stream, batch_size: int
) -> None:
    from oncestream.publish import ProducerSession
    from oncestream.publish._session import SOURCE_POS_HEADER

    await make_stream("SESS", ("sess.>",), duplicate_window=60, extra={"allow_atomic": True})
    opts = PublisherOptions(ack_timeout=1.0, max_attempts=10, retry_backoff=(0.05, 0.25))
    session = ProducerSession(
        conn,
        stream="SESS",
        subject_prefix="sess",
        producer_id="p",
        options=opts,
        batch_size=batch_size,
    )
    assert await session.start() is None
    total = 3000 if batch_size == 1 else 10_000
    task = asyncio.create_task(session.run((i, b"r%d" % i) for i in range(1, total + 1)))
    try:
        await _until(lambda: (session.position or 0) >= total // 3, 60, "a third published")
        reconnects = conn.reconnects
        nats_server.kill()
        nats_server.restart()
        await _until(lambda: conn.reconnects > reconnects, 30, "the reconnect")
        await asyncio.wait_for(task, 120)
    finally:
        task.cancel()
    await session.close()
    stored = await read_back(conn, "SESS")
    assert [int(m.headers[SOURCE_POS_HEADER]) for m in stored] == list(range(1, total + 1))
