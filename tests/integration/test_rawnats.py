"""harness/_rawnats.py's pipelined requests against a real server: a second answer to an
earlier request (two stream leaders answering across an election) is ignored.

Found by the fault campaign (issue 20, the 1ef397d re-run, trial 35): the
independent reader crashed with ``KeyError`` when such an answer arrived while
the next window of requests was waiting, and the harness stopped.

Also: the reader (``torture/rawread.py``) reads again after an answer that holds
neither a message nor an error, and fails naming it when no round gets a right one
(the CI run of 2d9a601 stopped the campaign with ``KeyError: 'message'``).
"""

from __future__ import annotations

import base64
import json

import pytest

from harness import RawClient
from oncestream import Connection
from oncestream.server import NatsServer


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


async def _fake_stream(conn: Connection, bad_answers: int) -> list[object]:
    """Answers the raw reader's API for a stream ``S`` of two records in domain ``fake``
    (no server has that domain, so only these answer); the first ``bad_answers`` gets of
    seq 2 get a JSON answer holding neither ``message`` nor ``error``."""
    left = [bad_answers]

    async def info(msg):  # type: ignore[no-untyped-def]
        state = {"messages": 2, "first_seq": 1, "last_seq": 2}
        await conn.nc.publish(msg.reply, json.dumps({"state": state}).encode())

    async def get(msg):  # type: ignore[no-untyped-def]
        seq = json.loads(msg.data)["seq"]
        if seq == 2 and left[0] > 0:
            left[0] -= 1
            body = {"type": "io.nats.jetstream.api.v1.stream_msg_get_response"}
        else:
            data = base64.b64encode(b"ab"[seq - 1 : seq]).decode()
            body = {"message": {"seq": seq, "subject": "s", "data": data}}
        await conn.nc.publish(msg.reply, json.dumps(body).encode())

    subs = [
        await conn.nc.subscribe("$JS.fake.API.STREAM.INFO.S", cb=info),
        await conn.nc.subscribe("$JS.fake.API.STREAM.MSG.GET.S", cb=get),
    ]
    await conn.nc.flush()
    return subs


async def test_an_answer_without_message_or_error_is_read_again(
    nats_server: NatsServer, conn: Connection
) -> None:
    """The CI run of 2d9a601 stopped the campaign with ``KeyError: 'message'``."""
    from torture.rawread import read_raw

    subs = await _fake_stream(conn, bad_answers=1)
    try:
        read = await read_raw([nats_server.url], "S", domain="fake")
    finally:
        for sub in subs:
            await sub.unsubscribe()
    assert dict(read.keys) == {"a": 1, "b": 1} and read.messages == 2


async def test_an_answer_never_right_fails_the_read_naming_it(
    nats_server: NatsServer, conn: Connection
) -> None:
    from torture.rawread import read_raw

    subs = await _fake_stream(conn, bad_answers=100)
    try:
        with pytest.raises(RuntimeError, match=r"not a STREAM\.MSG\.GET answer.*stream_msg_get"):
            await read_raw([nats_server.url], "S", domain="fake", wait=0)
    finally:
        for sub in subs:
            await sub.unsubscribe()
