"""Small helpers shared by the Spark source tests."""

from __future__ import annotations

import asyncio
from typing import Any

from oncestream._connection import Connection


async def publish(
    conn: Connection, subject: str, count: int, *, start: int = 0, headers: bool = False
) -> None:
    """Publish ``count`` messages ``m<i>`` to ``subject``, awaiting every JetStream ack."""
    js = conn.nc.jetstream()
    futures = []
    for i in range(start, start + count):
        hdrs = {"Nats-Msg-Id": f"id-{i}", "X-Index": str(i)} if headers else None
        futures.append(js.publish(subject, b"m%d" % i, headers=hdrs))
    await asyncio.gather(*futures)


def source_options(url: str, stream: str, **extra: Any) -> dict[str, str]:
    """Spark options for the jetstream source."""
    opts = {"servers": url, "stream": stream}
    opts.update({k: str(v) for k, v in extra.items()})
    return opts
