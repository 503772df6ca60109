"""Streams from synchronous code (benchmarks, Spark drivers): create them, count what they hold."""

from __future__ import annotations

import asyncio
from collections import Counter

import orjson

from oncestream import ConnectOptions, connect
from oncestream.read import read_stream
from oncestream.streams import StreamSpec, ensure_stream

__all__ = ["make_streams", "order_ids_on"]


def make_streams(url: str, *specs: StreamSpec) -> None:
    """Create (or keep) each stream of ``specs`` on the server at ``url``."""

    async def run() -> None:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            for spec in specs:
                await ensure_stream(conn, spec)

    asyncio.run(run())


def order_ids_on(url: str, stream: str, subject: str) -> Counter[str]:
    """How often each ``order_id`` occurs in the messages of ``stream`` on ``subject``."""

    async def run() -> Counter[str]:
        counts: Counter[str] = Counter()
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            async for chunk in read_stream(conn, stream):
                counts.update(
                    orjson.loads(r.data)["order_id"] for r in chunk if r.subject == subject
                )
        return counts

    return asyncio.run(run())
