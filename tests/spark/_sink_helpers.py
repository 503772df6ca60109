"""Shared helpers of the sink tests: sync stream setup, publishing inputs, auditing outputs."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import orjson

from oncestream import ConnectOptions, connect
from oncestream.audit import AuditReport, OutputSpec, audit
from oncestream.publish import Publisher, PublisherOptions
from oncestream.read import read_stream
from oncestream.streams import StreamSpec, delete_message, ensure_stream, get_message


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


def await_window_passed(url: str, stream: str, subject: str, timeout: float = 30.0) -> float:
    """Return once ``stream``'s duplicate window no longer holds anything stored so far.

    A probe (a msg id unique to this call) is published on ``subject`` (which
    ``stream`` must capture) and re-published every 0.1 s: while the server answers
    ``duplicate`` its window still holds the probe's id. nats-server drops ids in
    the order they were stored, so once it stores the probe again, every id stored
    before the first probe is gone too. Each stored probe is deleted. Returns the
    seconds waited.

    Raises:
        AssertionError: the window held the probe for ``timeout`` seconds.
    """

    async def run() -> float:
        probe = {"Nats-Msg-Id": f"window-probe-{uuid.uuid4().hex}"}
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            js = conn.nc.jetstream()
            start = time.monotonic()
            first = await js.publish(subject, b"probe", stream=stream, headers=probe)
            await delete_message(conn, stream, first.seq)
            while time.monotonic() - start < timeout:
                await asyncio.sleep(0.1)  # the server's window is a clock: poll it, bounded
                ack = await js.publish(subject, b"probe", stream=stream, headers=probe)
                if not ack.duplicate:
                    await delete_message(conn, stream, ack.seq)
                    return time.monotonic() - start
        raise AssertionError(f"stream {stream}'s duplicate window held a probe for {timeout}s")

    return asyncio.run(run())
