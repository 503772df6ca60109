"""AtomicPublisher against a real nats-server: every id once, lost commit acks settled, not re-sent.

The fault cases run the client through a TCP relay (tests/_wiretap.py) in front of
the server, against a stream whose duplicate window (1 s) is shorter than the
fault: the server cannot drop a second copy, so only the publisher's settle probe
and read-back keep each chunk stored once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from oncestream import ConfigError, Connection, ConnectOptions, StreamMismatch, connect
from oncestream.publish import AtomicPublisher, PublisherOptions
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs
from tests._wiretap import WireTap
from tests.integration.test_publisher import read_back

WINDOW = 1.0


def rows(n: int, prefix: str = "id", start: int = 0) -> tuple[list[str], list[bytes], list[str]]:
    ids = [f"{prefix}-{i}" for i in range(start, start + n)]
    return [f"at.{i % 3}" for i in range(start, start + n)], [i.encode() for i in ids], ids


async def stored_counts(conn: Connection, stream: str) -> Counter[str | None]:
    return Counter(m.msg_id for m in await read_back(conn, stream))


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20) -> None:
    """Wait for a condition the test cannot be told about (polled, not slept through)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_every_id_once_in_pipelined_chunks(conn: Connection, make_stream) -> None:
    await make_stream("AT", ("at.>",), allow_atomic=True)
    subjects, datas, ids = rows(10_500)
    headers = [{"X-Row": str(i)} if i % 1000 == 7 else None for i in range(len(ids))]
    opts = PublisherOptions(stream="AT")
    async with AtomicPublisher(conn, opts, chunk_size=1000, max_inflight=4) as pub:
        for start in range(0, len(ids), 3000):  # calls of any size; chunks within each
            end = start + 3000
            await pub.publish(
                subjects[start:end], datas[start:end], ids[start:end], headers[start:end]
            )
    assert (pub.stats.stored, pub.stats.duplicates, pub.stats.lost_acks) == (10_500, 0, 0)
    assert pub.stats.batches == 11 and pub.stats.max_seq == 10_500  # 3 x (3 x 1000) + 2
    stored = await read_back(conn, "AT")
    assert [m.msg_id for m in stored] == ids
    assert stored[7].headers["X-Row"] == "7" and stored[7].data == b"id-7"
    # Batches of exactly 1000 messages, the server's largest (nats-server in the venv).
    sizes = Counter(m.headers["Nats-Batch-Id"] for m in stored)
    assert sorted(sizes.values()) == [500] + [1000] * 10, sizes


async def test_ids_another_publisher_stored_are_found_and_the_rest_stays_one_batch(
    conn: Connection, make_stream
) -> None:
    """10201 for ids older than the chunk's floor: found in the stream, the rest re-sent whole."""
    await make_stream("AT", ("at.>",), allow_atomic=True)
    opts = PublisherOptions(stream="AT")
    async with AtomicPublisher(conn, opts, chunk_size=100) as first:
        await first.publish(*rows(150))
    async with AtomicPublisher(conn, opts, chunk_size=100) as again:
        await again.publish(*rows(200, start=100))  # ids 100..149 are stored already
    s = again.stats
    assert (s.stored, s.duplicates, s.batches, s.read_backs, s.singles) == (150, 50, 2, 1, 0), s
    counts = await stored_counts(conn, "AT")
    assert len(counts) == 300 and set(counts.values()) == {1}
    rest = [m for m in await read_back(conn, "AT") if 150 <= int((m.msg_id or "")[3:]) < 200]
    assert len(rest) == 50 and len({m.headers["Nats-Batch-Id"] for m in rest}) == 1  # one batch


async def test_a_rerun_right_after_the_first_stores_each_id_once(
    conn: Connection, make_stream
) -> None:
    """Issue 38: the same 20,000 ids again at once, inside a 30 s window: each stored once.

    Every chunk of the re-run is refused (10201) for ids stored before the re-run
    started. Shown failing before the stream was searched for them: the rows then
    went one per batch, 1,000 at once, acks timed out, the re-run fell to ~540
    rows/s and reached later rows after the window (26,817 messages for 20,000 ids).
    Its rate is measured by bench/bench_publish.py, not here.
    """
    await make_stream("AT", ("at.>",), duplicate_window=30, allow_atomic=True)
    subjects, datas, ids = rows(20_000)
    opts = PublisherOptions(stream="AT")
    async with AtomicPublisher(conn, opts) as first:
        await first.publish(subjects, datas, ids)
    async with AtomicPublisher(conn, opts) as again:
        await again.publish(subjects, datas, ids)
    counts = await stored_counts(conn, "AT")
    twice = sum(1 for n in counts.values() if n > 1)
    assert (len(counts), sum(counts.values()), twice) == (20_000, 20_000, 0)
    s = again.stats
    assert (s.stored, s.duplicates, s.singles, s.lost_acks) == (0, 20_000, 0, 0), s
    assert s.read_backs == 20  # one search per chunk


async def test_ids_whose_messages_are_gone_go_one_by_one(conn: Connection, make_stream) -> None:
    """A purged stream keeps its msg ids in the window: no read finds them, PubAcks do."""
    await make_stream("AT", ("at.>",), allow_atomic=True)
    opts = PublisherOptions(stream="AT")
    async with AtomicPublisher(conn, opts, chunk_size=100) as first:
        await first.publish(*rows(250))
    await conn.api("STREAM.PURGE.AT")
    async with AtomicPublisher(conn, opts, chunk_size=100) as again:
        await again.publish(*rows(400))  # chunks 0..99, 100..199 and 200..299 refused
    s = again.stats
    assert (s.stored, s.duplicates, s.batches, s.singles) == (150, 250, 1, 300), s
    counts = await stored_counts(conn, "AT")
    assert counts == Counter(f"id-{i}" for i in range(250, 400))


async def test_ids_repeated_within_a_chunk_are_stored_once(conn: Connection, make_stream) -> None:
    await make_stream("AT", ("at.>",), allow_atomic=True)
    ids = ["a", "b", "a", "c", "b"]
    async with AtomicPublisher(conn, PublisherOptions(stream="AT")) as pub:
        await pub.publish(["at.x"] * 5, [b"1", b"2", b"3", b"4", b"5"], ids)
    assert (pub.stats.stored, pub.stats.duplicates, pub.stats.batches) == (3, 2, 1)
    stored = await read_back(conn, "AT")
    assert [(m.msg_id, m.data) for m in stored] == [("a", b"1"), ("b", b"2"), ("c", b"4")]


async def test_a_chunk_captured_by_another_stream_is_refused_whole(
    conn: Connection, make_stream
) -> None:
    """Only a chunk's first row says which stream it expects; no row lands elsewhere."""
    await make_stream("AT", ("at.>",), allow_atomic=True)
    await make_stream("OTHER", ("other.>",), allow_atomic=True)
    ids = [f"o-{i}" for i in range(5)]
    pub = AtomicPublisher(conn, PublisherOptions(stream="AT"), chunk_size=5)
    with pytest.raises(StreamMismatch) as err:
        await pub.publish(["other.x"] * 5, [b"x"] * 5, ids)
        await pub.flush()
    assert err.value.err_code == 10060
    await pub.close()
    for stream in ("AT", "OTHER"):
        assert (await conn.stream_info(stream))["state"]["messages"] == 0
    stored = await read_back(conn, "AT")
    assert stored == []


async def test_needs_allow_atomic(conn: Connection, make_stream) -> None:
    await make_stream("PLAIN", ("plain.>",))
    pub = AtomicPublisher(conn, PublisherOptions(stream="PLAIN"))
    with pytest.raises(ConfigError, match=r"'PLAIN'.*stream edit PLAIN --allow-atomic"):
        await pub.start()
    with pytest.raises(ConfigError, match=r"chunk_size must be 1\.\.1000, got 1001"):
        AtomicPublisher(conn, PublisherOptions(stream="PLAIN"), chunk_size=1001)


async def test_a_server_staging_one_batch_per_stream_at_a_time(
    server_factory, tmp_path: Path
) -> None:
    """max_inflight_per_stream 1: one connection's batches never wait beside each other.

    The stream's ingest loop takes a connection's messages in order, so a batch's
    commit closes it before the next batch's first message opens one: 8 batches
    awaiting their acks are staged one at a time. When another writer's batch
    holds the one place (here one whose commit never comes, abandoned after the
    server's 1 s batch timeout), the server drops the first message of each of
    ours (10176 at its commit), and each is sent again until stored, once.
    """
    config = server_configs.atomic_batch_limits(tmp_path, max_inflight_per_stream=1, timeout="1s")
    server = server_factory(config)
    client = await connect(ConnectOptions(servers=(server.url,)))
    try:
        await ensure_stream(client, StreamSpec(name="AT", subjects=("at.>",), allow_atomic=True))
        opts = PublisherOptions(stream="AT", max_attempts=8)
        async with AtomicPublisher(client, opts, chunk_size=500, max_inflight=8) as alone:
            await alone.publish(*rows(10_000, prefix="alone"))
        assert (alone.stats.stored, alone.stats.batches, alone.stats.resent) == (10_000, 20, 0)

        other = await connect(ConnectOptions(servers=(server.url,)))
        try:
            stale = {"Nats-Batch-Id": "stale", "Nats-Batch-Sequence": "1"}
            await other.nc.publish("at.x", b"never committed", headers=stale)
            # Answered (10060, not stored) once the stream has staged the batch before it.
            refused = await other.nc.request(
                "at.x", b"", headers={"Nats-Expected-Stream": "none"}, timeout=5
            )
            assert b"10060" in refused.data
            async with AtomicPublisher(client, opts, chunk_size=500) as blocked:
                await blocked.publish(*rows(2_000, prefix="blocked"))
        finally:
            await other.close()
        counts = await stored_counts(client, "AT")
    finally:
        await client.close()
    assert len(counts) == 12_000 and set(counts.values()) == {1}
    assert blocked.stats.stored == 2_000 and blocked.stats.resent >= 1, blocked.stats


#: What the fault loses, and what the publisher must then do.
FAULTS = {
    # The server is stopped before it reads the batches; after SIGCONT it commits them
    # and answers the probes: the late commit acks arrive first and decide.
    "server-stopped": {"lost_acks": True, "read_backs": 0, "resent": 0},
    # The server commits every batch at once; its acks wait in the relay until the
    # connection is cut, past the window: only the read-back shows they are stored.
    "acks-lost": {"lost_acks": True, "read_backs": True, "resent": 0},
    # The batches wait in the relay and die with the connection: read back as absent,
    # they are sent again, once.
    "batches-lost": {"lost_acks": True, "read_backs": True, "resent": 4},
}


@pytest.mark.parametrize("fault", FAULTS)
async def test_lost_commit_ack_settles_and_reads_back_instead_of_resending(
    nats_server: NatsServer, conn: Connection, make_stream, fault: str
) -> None:
    await make_stream("AT", ("at.>",), duplicate_window=WINDOW, allow_atomic=True)
    subjects, datas, ids = rows(400)
    with WireTap(nats_server.port) as tap:
        client = await connect(ConnectOptions(servers=(tap.url(),), reconnect_wait=0.05))
        # Probes every 0.3 s for up to 6 s: the fault lasts longer than the window.
        opts = PublisherOptions(stream="AT", ack_timeout=0.3, max_attempts=20)
        pub = AtomicPublisher(client, opts, chunk_size=100, max_inflight=4)
        await pub.start()

        async def stored() -> int:
            return int((await conn.stream_info("AT"))["state"]["messages"])

        async def all_lost() -> bool:
            return pub.stats.lost_acks >= 4

        try:
            if fault == "server-stopped":
                nats_server.pause()
            else:
                tap.hold(replies=True, requests=fault == "batches-lost")
            await pub.publish(subjects, datas, ids)  # 4 chunks, 4 in flight: all sent
            flushed = asyncio.create_task(pub.flush())
            if fault == "acks-lost":
                await until(lambda: _equals(stored, 400), "the server storing every batch")
            committed = time.monotonic()
            await until(all_lost, "every chunk's ack timeout")
            # Past the window a blind re-send would be stored a second time.
            await asyncio.sleep(max(0.0, committed + WINDOW + 0.3 - time.monotonic()))
            if fault == "server-stopped":
                nats_server.resume()
            else:
                tap.cut()  # held bytes die with the connection
                tap.release()
            stats = await flushed
        finally:
            if fault == "server-stopped":
                nats_server.resume()
            await pub.close()
            await client.close()
    counts = await stored_counts(conn, "AT")
    duplicated = {k: v for k, v in counts.items() if v > 1}
    assert not duplicated, (
        f"{len(duplicated)} ids stored twice, e.g. {sorted(map(str, duplicated))[:3]}"
    )
    assert set(counts) == set(ids)
    expected = FAULTS[fault]
    assert stats.stored == 400 and stats.duplicates == 0
    assert bool(stats.lost_acks) is expected["lost_acks"]
    if expected["read_backs"] is True:
        assert stats.read_backs >= 1
    else:
        assert stats.read_backs == expected["read_backs"]
    assert stats.resent == expected["resent"], stats


async def _equals(get: Callable[[], Awaitable[int]], value: int) -> bool:
    return await get() == value
