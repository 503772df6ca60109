"""Helpers of the sink tests: auditing outputs, stream state, stored headers (sync).

Creating streams and publishing inputs: ``harness`` (bench uses them too)."""

from __future__ import annotations

import asyncio
from typing import Any

from oncestream import ConnectOptions, connect
from oncestream.audit import AuditReport, OutputSpec, audit
from oncestream.streams import get_message


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
