"""Producer sessions against a real server: exactly once across a restart beyond the window."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from oncestream import ConfigError, Connection, ConnectOptions, WrongLastSequence, connect
from oncestream.publish import ProducerSession, Publisher, PublisherOptions
from oncestream.publish._session import SOURCE_POS_HEADER
from oncestream.streams import delete_stream
from tests.integration.test_publisher import read_back

# Short ack timeouts keep retries quick (sessions do not need the window guard).
FAST = PublisherOptions(ack_timeout=0.2, max_attempts=2, retry_backoff=(0.1,))
TOTAL = 10_000


def records() -> Iterator[tuple[int, bytes]]:
    """The same position-numbered input on every run."""
    for position in range(1, TOTAL + 1):
        yield position, b"record %d" % position


@pytest.mark.parametrize(
    ("allow_direct", "batch_size"),
    [(True, 1), (False, 1), (True, 500)],
    ids=["direct", "msg-get", "atomic-batches"],
)
async def test_restart_beyond_window_stores_each_record_once(
    options: ConnectOptions, conn: Connection, make_stream, allow_direct: bool, batch_size: int
) -> None:
    await make_stream(
        "PS",
        ("ps.>",),
        duplicate_window=1.0,
        allow_direct=allow_direct,
        extra={"allow_atomic": True},
    )

    # Run 1: crash (cancel) part-way through the input.
    first_conn = await connect(options)
    first = ProducerSession(
        first_conn,
        stream="PS",
        subject_prefix="ps.src",
        producer_id="loader",
        options=FAST,
        batch_size=batch_size,
    )
    assert await first.start() is None

    def crashing() -> Iterator[tuple[int, bytes]]:
        # The crash lands at a known point, however fast the server stores.
        for position, data in records():
            if position == TOTAL // 3:
                task.cancel()
            yield position, data

    task = asyncio.create_task(first.run(crashing()))
    with pytest.raises(asyncio.CancelledError):
        await task
    crashed_at = first.position
    await first_conn.close()

    # Past the duplicate window msg ids no longer protect anything.
    await asyncio.sleep(1.2)

    # Run 2: same producer id, same input from the beginning.
    second = ProducerSession(
        conn,
        stream="PS",
        subject_prefix="ps.src",
        producer_id="loader",
        options=FAST,
        batch_size=batch_size,
    )
    resume = await second.start()
    assert resume is not None and resume >= (crashed_at or 0)
    newly = await second.run(records())
    await second.close()
    assert second.skipped == resume
    assert newly == TOTAL - resume

    if not allow_direct:
        # read_back uses batched direct gets; the session itself used STREAM.MSG.GET.
        await make_stream(
            "PS", ("ps.>",), duplicate_window=1.0, allow_direct=True, extra={"allow_atomic": True}
        )
    stored = await read_back(conn, "PS")
    positions = [int(m.headers[SOURCE_POS_HEADER]) for m in stored]
    assert positions == list(range(1, TOTAL + 1))
    assert [m.data for m in stored] == [data for _, data in records()]
    assert {m.subject for m in stored} == {"ps.src.loader"}
    assert [m.msg_id for m in stored[:2]] == ["loader:1", "loader:2"]


async def test_zombie_producer_is_fenced(conn: Connection, make_stream) -> None:
    await make_stream("ZS", ("zs.>",), duplicate_window=1.0)
    live = ProducerSession(conn, stream="ZS", subject_prefix="zs", producer_id="p", options=FAST)
    zombie = ProducerSession(conn, stream="ZS", subject_prefix="zs", producer_id="p", options=FAST)
    assert await zombie.start() is None
    assert await live.start() is None
    await live.run([(1, b"a"), (2, b"b")])
    with pytest.raises(WrongLastSequence) as info:
        await zombie.publish(5, b"stale view")
    assert info.value.err_code == 10071
    # Another producer id owns another subject and is unaffected.
    other = ProducerSession(conn, stream="ZS", subject_prefix="zs", producer_id="q", options=FAST)
    assert await other.start() is None
    assert (await other.publish(1, b"q1")) is not None
    restarted = ProducerSession(
        conn, stream="ZS", subject_prefix="zs", producer_id="p", options=FAST
    )
    assert await restarted.start() == 2
    assert await restarted.publish(2, b"b") is None
    for session in (live, zombie, other, restarted):
        await session.close()
    assert [m.data for m in await read_back(conn, "ZS")] == [b"a", b"b", b"q1"]


async def test_stream_recreated_under_a_running_session(conn: Connection, make_stream) -> None:
    """Issue 19: the session's last sequence means nothing in a re-created stream; say so."""
    await make_stream("RS", ("rs.>",))
    session = ProducerSession(conn, stream="RS", subject_prefix="rs", producer_id="p", options=FAST)
    assert await session.start() is None
    await session.run([(1, b"old 1"), (2, b"old 2"), (3, b"old 3")])
    await delete_stream(conn, "RS")
    await make_stream("RS", ("rs.>",))
    with pytest.raises(WrongLastSequence) as info:
        await session.publish(4, b"new 4")
    text = str(info.value)
    assert "stream 'RS' was deleted and re-created while this session ran" in text
    assert "call start() again" in text and "another producer" not in text
    # The resume point lives in the stream: the new one is empty, so everything goes again.
    assert await session.start() is None
    await session.run([(i, b"r%d" % i) for i in range(1, 6)])
    await session.close()
    assert [m.data for m in await read_back(conn, "RS")] == [b"r%d" % i for i in range(1, 6)]


async def test_session_and_publisher_through_a_jetstream_domain(server_factory, tmp_path) -> None:
    from oncestream.streams import StreamSpec, ensure_stream
    from tests import server_configs

    server = server_factory(server_configs.jetstream(tmp_path / "hub", domain="hub"), "hub")
    opts = ConnectOptions(servers=(server.url,), domain="hub")
    async with await connect(opts) as hub:
        assert hub.prefix == "$JS.hub.API"
        await ensure_stream(hub, StreamSpec(name="DOM", subjects=("dom.>",), duplicate_window=1))
        session = ProducerSession(
            hub, stream="DOM", subject_prefix="dom", producer_id="p", options=FAST
        )
        assert await session.start() is None
        await session.run([(1, b"a"), (2, b"b")])
        await session.close()
        again = ProducerSession(
            hub, stream="DOM", subject_prefix="dom", producer_id="p", options=FAST
        )
        assert await again.start() == 2
        ack = await again.publish(3, b"c")
        await again.close()
        assert ack is not None and ack.domain == "hub" and ack.seq == 3


async def test_retry_of_a_stored_message_is_recognised(conn: Connection, make_stream) -> None:
    """An earlier attempt was stored but its ack lost: the re-send is not a zombie."""
    await make_stream("RS", ("rs.>",), duplicate_window=1.0)
    session = ProducerSession(conn, stream="RS", subject_prefix="rs", producer_id="p", options=FAST)
    assert await session.start() is None
    # What the lost attempt stored: same subject, msg id and session headers.
    async with Publisher(conn, FAST) as raw:
        stored = await (
            await raw.publish(
                session.subject,
                b"one",
                msg_id=session.msg_id(1),
                headers={SOURCE_POS_HEADER: "1", "Oncestream-Producer": "p"},
                expected_last_subject_seq=0,
            )
        )
    ack = await session.publish(1, b"one")
    assert ack is not None and ack.duplicate and ack.seq == stored.seq
    assert (await session.publish(2, b"two")) is not None
    await session.close()
    assert [m.data for m in await read_back(conn, "RS")] == [b"one", b"two"]


async def test_atomic_batches_fence_zombies_and_need_allow_atomic(
    conn: Connection, make_stream
) -> None:
    await make_stream("NA", ("na.>",))
    plain = ProducerSession(
        conn, stream="NA", subject_prefix="na", producer_id="p", options=FAST, batch_size=10
    )
    with pytest.raises(ConfigError, match="allow_atomic"):
        await plain.start()

    await make_stream("AB", ("ab.>",), duplicate_window=1.0, extra={"allow_atomic": True})

    def session() -> ProducerSession:
        return ProducerSession(
            conn, stream="AB", subject_prefix="ab", producer_id="p", options=FAST, batch_size=4
        )

    live, zombie = session(), session()
    assert await zombie.start() is None
    assert await live.start() is None
    assert await live.run((i, b"%d" % i) for i in range(1, 11)) == 10
    for i in range(1, 4):
        assert await zombie.publish(i, b"stale") is None  # buffered, not yet sent
    with pytest.raises(WrongLastSequence) as info:
        await zombie.publish(4, b"stale")
    # Inside the window the server reports the repeated msg ids (10201) of the batch.
    assert info.value.err_code in (10071, 10201)
    restarted = session()
    assert await restarted.start() == 10
    await restarted.close()
    for s in (live, zombie):
        await s._publisher.close()
    stored = await read_back(conn, "AB")
    assert [m.data for m in stored] == [b"%d" % i for i in range(1, 11)]


@pytest.mark.parametrize("past_window", [False, True], ids=["in-window", "past-window"])
async def test_batch_retry_after_lost_commit_ack_is_recognised(
    conn: Connection, make_stream, past_window: bool
) -> None:
    """A batch whose earlier attempt committed (ack lost) is not stored twice, nor a zombie."""
    from oncestream.publish._batch import AtomicBatchSender

    await make_stream("LB", ("lb.>",), duplicate_window=1.0, extra={"allow_atomic": True})
    session = ProducerSession(
        conn, stream="LB", subject_prefix="lb", producer_id="p", options=FAST, batch_size=3
    )
    assert await session.start() is None
    # The "lost" attempt: the same batch, committed behind the session's back.
    earlier = AtomicBatchSender(
        conn, session.subject, "p", session.options, SOURCE_POS_HEADER, "Oncestream-Producer"
    )
    await earlier.start()
    records = [(i, b"r%d" % i, None) for i in (1, 2, 3)]
    assert await earlier.send(records, 0) == 3
    await earlier.close()
    if past_window:
        await asyncio.sleep(1.2)  # msg ids expire: only the sequence check is left
    await session.run([(1, b"r1"), (2, b"r2"), (3, b"r3"), (4, b"r4")])
    await session.close()
    stored = await read_back(conn, "LB")
    assert [m.data for m in stored] == [b"r1", b"r2", b"r3", b"r4"]
