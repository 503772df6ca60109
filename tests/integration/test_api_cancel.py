"""A cancelled JetStream API call leaves no request task behind.

The torture harness cancels a background STREAM.INFO poll at the end of each
fault phase; the orphaned nats-py request then failed later with a timeout
nobody retrieved ("Task exception was never retrieved" on stderr).
"""

from __future__ import annotations

import asyncio

import nats

from oncestream import Connection
from oncestream.server import NatsServer


async def test_cancelled_api_call_cancels_its_request(
    conn: Connection, nats_server: NatsServer
) -> None:
    silent = await nats.connect(nats_server.url)
    try:
        await silent.subscribe("$JS.API.STREAM.INFO.HANG")  # answers nothing
        await silent.flush()
        before = set(asyncio.all_tasks())
        call = asyncio.ensure_future(conn.api("STREAM.INFO.HANG", timeout=30))
        await asyncio.sleep(0)  # the call has started its request
        for _ in range(50):  # bounded: until the request task exists
            if len(asyncio.all_tasks() - before) > 1:
                break
            await asyncio.sleep(0.01)
        started = asyncio.all_tasks() - before - {call}
        assert started, "api() started no request task"
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        await asyncio.sleep(0)  # let the cancellation reach the request task
        assert all(t.done() for t in started), started
    finally:
        await silent.close()
