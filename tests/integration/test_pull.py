"""Continuous pull against a real server: refill, heartbeats, stop, reconnect, domains."""

from __future__ import annotations

import asyncio

import pytest

from harness import publish_n
from oncestream import (
    ConnectOptions,
    ConsumerNotFound,
    OperationTimeout,
    PullOptions,
    StreamNotFound,
    connect,
    pull_messages,
)
from oncestream.streams import add_stream, delete_stream
from tests import server_configs


async def _consumer(conn, stream: str, name: str = "c") -> None:  # type: ignore[no-untyped-def]
    await conn.api(
        f"CONSUMER.CREATE.{stream}.{name}",
        {"stream_name": stream, "config": {"durable_name": name, "ack_policy": "explicit"}},
    )


async def _collect(stream, count: int, timeout: float = 10) -> list:  # type: ignore[no-untyped-def,type-arg]
    got: list = []  # type: ignore[type-arg]
    async with asyncio.timeout(timeout):
        while len(got) < count:
            got += await stream.next_batch(timeout=timeout)
    return got


async def test_iterates_everything_with_refills(conn, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("P", ("p.>",))
    await _consumer(conn, "P")
    await publish_n(conn, "p.x", 250)
    seen: list[int] = []
    async with pull_messages(conn, "P", "c", PullOptions(batch=40, expires=5)) as messages:
        async for msg in messages:
            md = msg.metadata
            assert md.stream == "P" and md.num_delivered == 1
            seen.append(md.stream_seq)
            await msg.ack()
            if len(seen) == 250:
                break
        assert messages.pulls >= 250 // 40
    assert seen == list(range(1, 251))


async def test_missed_heartbeats_surface_and_recover(nats_server, conn, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("H", ("h.>",))
    await _consumer(conn, "H")
    stream = await pull_messages(
        conn, "H", "c", PullOptions(batch=10, expires=2, idle_heartbeat=0.2)
    ).start()
    try:
        nats_server.pause()
        try:
            with pytest.raises(OperationTimeout, match="no heartbeat"):
                await stream.next_batch(timeout=5)
        finally:
            nats_server.resume()
        assert stream.heartbeats_missed >= 1
        await publish_n(conn, "h.x", 3)
        got = []
        for _ in range(20):
            try:
                got += await stream.next_batch(timeout=1)
            except OperationTimeout:
                continue
            if len(got) >= 3:
                break
        assert [m.metadata.stream_seq for m in got] == [1, 2, 3]
    finally:
        await stream.stop()


async def test_stop_ends_iteration(conn, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("ST", ("st.>",))
    await _consumer(conn, "ST")
    stream = await pull_messages(conn, "ST", "c", PullOptions(expires=5)).start()

    async def consume() -> int:
        count = 0
        async for _msg in stream:
            count += 1
        return count

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    await stream.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_deleted_consumer_is_reported(conn, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("D", ("d.>",))
    await _consumer(conn, "D")
    options = PullOptions(expires=2, idle_heartbeat=0.2)
    stream = await pull_messages(conn, "D", "c", options).start()
    try:
        await conn.api("CONSUMER.DELETE.D.c")
        # Either the waiting request gets "409 Consumer Deleted", or (deleted
        # before the request registered) heartbeats stop and the re-pull finds
        # no responders.
        with pytest.raises(ConsumerNotFound, match=r"consumer 'c' .*stream 'D'"):
            for _ in range(10):
                try:
                    await stream.next_batch(timeout=2)
                except OperationTimeout:
                    continue
    finally:
        await stream.stop()


async def test_deleted_stream_is_reported_as_the_stream(conn, make_stream) -> None:  # type: ignore[no-untyped-def]
    # Deleting a stream deletes its consumers: the waiting pull gets "409 Consumer
    # Deleted", and STREAM.INFO tells the two cases apart (issue 19).
    await make_stream("DS", ("ds.>",))
    await _consumer(conn, "DS")
    stream = await pull_messages(conn, "DS", "c", PullOptions(expires=5)).start()
    try:
        await stream.next_batch(timeout=0.2)  # the pull request is registered
        await delete_stream(conn, "DS")
        with pytest.raises(StreamNotFound, match=r"stream 'DS' was deleted .*consumer 'c'"):
            await stream.next_batch(timeout=10)
    finally:
        await stream.stop()


@pytest.mark.parametrize(
    ("stream_name", "error", "reason"),
    [
        ("M", ConsumerNotFound, "consumer 'nobody' not found on stream 'M'"),
        ("GONE", StreamNotFound, "stream 'GONE' not found, so neither is consumer 'nobody'"),
    ],
)
async def test_pull_on_a_missing_consumer_is_confirmed_then_reported(  # type: ignore[no-untyped-def]
    conn, make_stream, stream_name, error, reason
) -> None:
    # Every pull gets "503 no responders"; after 5 in a row the stream asks
    # CONSUMER.INFO, and only the server's answer (not found) ends the iteration.
    await make_stream("M", ("m.>",))
    stream = await pull_messages(conn, stream_name, "nobody", PullOptions(expires=2)).start()
    try:
        with pytest.raises(error, match=reason):
            await stream.next_batch(timeout=20)
        assert stream.no_responders_total >= 5 and stream.consumer_checks == 1
    finally:
        await stream.stop()


async def test_repulls_after_server_restart(nats_server, conn, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("R", ("r.>",))
    await _consumer(conn, "R")
    stream = await pull_messages(conn, "R", "c", PullOptions(batch=10, expires=30)).start()
    try:
        await publish_n(conn, "r.x", 2)
        first = await _collect(stream, 2)
        for msg in first:
            await msg.ack()
        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        conn.on_reconnect(on_reconnect)
        nats_server.restart()
        await asyncio.wait_for(reconnected.wait(), 20)
        await publish_n(conn, "r.x", 2, start=2)
        # The pull pending on the old server process is gone; only a re-pull delivers.
        got = await _collect(stream, 2)
        assert [m.metadata.stream_seq for m in got] == [3, 4]
    finally:
        await stream.stop()


async def test_pull_through_a_domain(server_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = server_factory(server_configs.jetstream(tmp_path / "dom", domain="hub"), "dom")
    async with await connect(ConnectOptions(servers=(server.url,), domain="hub")) as conn:
        await add_stream(conn, {"name": "DM", "subjects": ["dm.>"], "storage": "file"})
        await _consumer(conn, "DM")
        await publish_n(conn, "dm.x", 5)
        async with pull_messages(conn, "DM", "c", PullOptions(batch=5, expires=5)) as stream:
            got = await _collect(stream, 5)
        assert len(got) == 5
        assert got[0].metadata.stream == "DM"
        assert got[0].metadata.domain in ("hub", None)  # v2 ack subjects carry the domain
