"""A stream's ``created`` time is its identity (issue 19): what offsets and sessions record.

The Spark source's offsets and producer sessions tell a re-created stream from
the old one by ``STREAM.INFO``'s ``created``. These are the server facts that
rest on: it survives a purge, a config update and a server restart, and a
stream deleted and re-created under the same name gets a new one.
"""

from __future__ import annotations

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, delete_stream, ensure_stream


async def _created(url: str, stream: str) -> str:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return str((await conn.stream_info(stream))["created"])


async def test_created_survives_purge_update_and_restart(nats_server: NatsServer) -> None:
    url = nats_server.url
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        info = await ensure_stream(conn, StreamSpec(name="IDN", subjects=("idn.>",)))
        created = str(info["created"])
        await conn.nc.jetstream().publish("idn.x", b"1")
        await conn.api("STREAM.PURGE.IDN", {})
        await ensure_stream(conn, StreamSpec(name="IDN", subjects=("idn.>",), max_msgs=10))
    assert await _created(url, "IDN") == created
    nats_server.restart()
    assert await _created(url, "IDN") == created
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await delete_stream(conn, "IDN")
        await ensure_stream(conn, StreamSpec(name="IDN", subjects=("idn.>",)))
    assert await _created(url, "IDN") != created
