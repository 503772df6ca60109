"""Helpers every test folder shares: filling a stream, a free port, counting effects."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oncestream import Connection
from oncestream.server import free_ports

__all__ = ["effects", "fill_stream", "free_port"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    return free_ports(1)[0]


async def fill_stream(
    conn: Connection,
    subject: str,
    count: int,
    *,
    start: int = 0,
    data: Callable[[int], bytes] = lambda i: b"%d" % i,
    headers: Callable[[int], dict[str, str]] | None = None,
) -> None:
    """Publish ``count`` messages (``data(i)``, ``headers(i)``) with nats-py and await every ack.

    nats-py's own JetStream publish, not oncestream's Publisher: the stream is
    filled by a different client than the one under test.
    """
    js = conn.nc.jetstream()
    futures = [
        await js.publish_async(subject, data(i), headers=headers(i) if headers else None)
        for i in range(start, start + count)
    ]
    await asyncio.gather(*futures)


def effects(db: Path | str, table: str = "effects", column: str = "id") -> tuple[int, int]:
    """``(rows, distinct keys)`` of the effects table a test handler wrote (tests.handlers)."""
    con = sqlite3.connect(db)
    try:
        row: Any = con.execute(f"SELECT count(*), count(DISTINCT {column}) FROM {table}").fetchone()
        return int(row[0]), int(row[1])
    finally:
        con.close()
