"""Helpers of the sink tests: auditing outputs, stream state, stored headers (sync).

Creating streams and publishing inputs: ``harness`` (bench uses them too)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from oncestream import ConnectOptions, connect
from oncestream.audit import AuditReport, OutputSpec, audit
from oncestream.streams import delete_message, get_message


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
