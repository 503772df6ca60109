"""tests/_rawnats.py's pipelined requests against a real server: a second answer to an
earlier request (two stream leaders answering across an election) is ignored.

Found by the fault campaign (issue 20, the 1ef397d re-run, trial 35): the
independent reader crashed with ``KeyError`` when such an answer arrived while
the next window of requests was waiting, and the harness stopped.
"""

from __future__ import annotations

from oncestream import Connection
from oncestream.server import NatsServer
from tests._rawnats import RawClient


async def test_a_late_second_answer_to_an_earlier_window_is_ignored(
    nats_server: NatsServer, conn: Connection
) -> None:
    async def answer(msg):  # type: ignore[no-untyped-def]
        prefix, index = msg.reply.rsplit(".", 1)
        if index == "2":  # the second window: first a stale answer to request 0
            await conn.nc.publish(f"{prefix}.0", b"stale")
        await conn.nc.publish(msg.reply, b"answer-" + index.encode())

    sub = await conn.nc.subscribe("svc.get", cb=answer)
    await conn.nc.flush()
    try:
        async with RawClient(nats_server.url) as raw:
            answers = await raw.request_many([("svc.get", b"") for _ in range(4)], window=2)
    finally:
        await sub.unsubscribe()
    assert [body for _, body in answers] == [b"answer-0", b"answer-1", b"answer-2", b"answer-3"]
