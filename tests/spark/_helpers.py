"""Small helpers shared by the Spark source tests."""

from __future__ import annotations

from typing import Any

from oncestream import Connection
from tests._support import fill_stream


async def publish(
    conn: Connection, subject: str, count: int, *, start: int = 0, headers: bool = False
) -> None:
    """Publish ``count`` messages ``m<i>`` to ``subject``, awaiting every JetStream ack."""
    await fill_stream(
        conn,
        subject,
        count,
        start=start,
        data=lambda i: b"m%d" % i,
        headers=(lambda i: {"Nats-Msg-Id": f"id-{i}", "X-Index": str(i)}) if headers else None,
    )


def source_options(url: str, stream: str, **extra: Any) -> dict[str, str]:
    """Spark options for the jetstream source."""
    opts = {"servers": url, "stream": stream}
    opts.update({k: str(v) for k, v in extra.items()})
    return opts
