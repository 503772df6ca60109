"""Publishing N messages into a stream: the one fill every test, benchmark and campaign uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from oncestream import Connection, ConnectOptions, connect

__all__ = ["order", "publish_n", "publish_orders"]

#: JetStream's de-duplication header (nats-server's name).
_MSG_ID = "Nats-Msg-Id"


async def publish_n(
    conn: Connection,
    subject: str,
    count: int,
    *,
    start: int = 0,
    data: Callable[[int], bytes] = lambda i: b"%d" % i,
    headers: Callable[[int], dict[str, str]] | None = None,
    msg_id: Callable[[int], str] | None = None,
    stream: str | None = None,
    window: int = 2000,
) -> None:
    """Publish messages ``start .. start + count - 1`` to ``subject``; await every PubAck.

    Message ``i`` carries ``data(i)``, with ``msg_id`` the ``Nats-Msg-Id``
    ``msg_id(i)``, then the headers ``headers(i)``; with ``stream``, the server
    refuses it unless that stream captures ``subject``. At most ``window`` are
    unacknowledged at once. It uses nats-py's own JetStream publish, not
    oncestream's Publisher: the stream is filled by another client than the one
    under test (or measured).

    Raises:
        nats.js.errors.APIError: the server refused a message (e.g. no stream
            captures ``subject``).

    Example::

        await publish_n(conn, "orders.x", 1000, msg_id=lambda i: f"o{i}")
    """
    js = conn.nc.jetstream()
    pending = []
    for i in range(start, start + count):
        head = {_MSG_ID: msg_id(i)} if msg_id is not None else {}
        if headers is not None:
            head.update(headers(i))
        pending.append(
            await js.publish_async(subject, data(i), stream=stream, headers=head or None)
        )
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


def order(i: int) -> bytes:
    """The body of order ``i``: ``{"order_id": "o000042", "amount": 42 % 97}``."""
    return orjson.dumps({"order_id": f"o{i:06d}", "amount": i % 97})


def publish_orders(url: str, stream: str, subject: str, count: int, start: int = 0) -> None:
    """Publish orders ``start .. start + count - 1`` (msg id = order id) into ``stream``; sync."""

    async def run() -> None:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            await publish_n(
                conn,
                subject,
                count,
                start=start,
                data=order,
                msg_id=lambda i: f"o{i:06d}",
                stream=stream,
            )

    asyncio.run(run())
