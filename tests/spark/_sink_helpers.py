"""Shared helpers of the sink tests: sync stream setup, publishing inputs, auditing outputs."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson

from oncestream import ConnectOptions, connect
from oncestream.audit import AuditReport, OutputSpec, audit
from oncestream.publish import Publisher, PublisherOptions
from oncestream.read import read_stream
from oncestream.streams import StreamSpec, ensure_stream, get_message


def make_streams(url: str, *specs: StreamSpec) -> None:
    async def run() -> None:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            for spec in specs:
                await ensure_stream(conn, spec)

    asyncio.run(run())


def publish_orders(url: str, stream: str, subject: str, count: int, start: int = 0) -> None:
    async def run() -> None:
        conn = await connect(ConnectOptions(servers=(url,)))
        try:
            async with Publisher(conn, PublisherOptions(stream=stream)) as pub:
                for i in range(start, start + count):
                    body = orjson.dumps({"order_id": f"o{i:06d}", "amount": i % 97})
                    await pub.publish(subject, body, msg_id=f"o{i:06d}")
        finally:
            await conn.close()

    asyncio.run(run())


def run_audit(url: str, source: str, output: str, key: str = "lineage") -> AuditReport:
    async def run() -> AuditReport:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            return await audit(conn, source, [OutputSpec.parse(output)], key=key)

    return asyncio.run(run())


def stream_state(url: str, stream: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            return dict((await conn.stream_info(stream))["state"])

    return asyncio.run(run())


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


def raw_headers_of(url: str, stream: str, seq: int) -> bytes:
    """The header block of the message at ``seq`` of ``stream`` as stored (control headers too)."""

    async def run() -> bytes:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            return (await get_message(conn, stream, seq=seq)).raw_headers

    return asyncio.run(run())
