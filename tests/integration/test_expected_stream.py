"""Every publish with a target stream carries it: a subject of another stream is refused.

Issue 10 item 1: streams T1 (``t1.>``) and T2 (``t2.>``); publishing to ``t1.x``
with T2 as the target must store nothing in T1, from the Publisher, producer
sessions (single messages and atomic batches) and the Spark sink's commit store.
"""

from __future__ import annotations

import pytest

from oncestream import Connection, StreamMismatch
from oncestream.publish import ProducerSession, Publisher, PublisherOptions
from tests.integration.test_publisher import read_back


async def _two_streams(make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("T1", ("t1.>",), extra={"allow_atomic": True})
    await make_stream("T2", ("t2.>",), extra={"allow_atomic": True})


async def test_publisher_refuses_a_subject_of_another_stream(conn: Connection, make_stream) -> None:
    await _two_streams(make_stream)
    async with Publisher(conn, PublisherOptions(stream="T2")) as pub:
        ok = await (await pub.publish("t2.x", b"ok", msg_id="a"))
        wrong = await pub.publish("t1.x", b"wrong", msg_id="b")
        with pytest.raises(StreamMismatch) as info:
            await wrong
        headed = await pub.publish("t1.x", b"wrong", msg_id="c", headers={"X-A": "1"})
        with pytest.raises(StreamMismatch):
            await headed
    assert info.value.err_code == 10060
    assert ok.stream == "T2"
    assert await read_back(conn, "T1") == []
    assert [m.msg_id for m in await read_back(conn, "T2")] == ["a"]
    stored = (await read_back(conn, "T2"))[0]
    assert stored.data == b"ok"


@pytest.mark.parametrize("batch_size", [1, 10], ids=["single", "atomic-batch"])
async def test_producer_session_refuses_a_subject_of_another_stream(
    conn: Connection, make_stream, batch_size: int
) -> None:
    await _two_streams(make_stream)
    session = ProducerSession(
        conn,
        stream="T2",
        subject_prefix="t1.src",
        producer_id="p1",
        options=PublisherOptions(ack_timeout=0.5, max_attempts=2),
        batch_size=batch_size,
    )
    await session.start()
    with pytest.raises(StreamMismatch):
        await session.run((i, b"r%d" % i) for i in range(1, 11))
    await session.close()
    assert await read_back(conn, "T1") == []
    assert await read_back(conn, "T2") == []
