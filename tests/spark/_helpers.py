"""Small helpers shared by the Spark source tests."""

from __future__ import annotations

from typing import Any

from harness import publish_n
from oncestream import Connection


async def publish(
    conn: Connection, subject: str, count: int, *, start: int = 0, headers: bool = False
) -> None:
    """Publish ``count`` messages ``m<i>`` to ``subject``, awaiting every JetStream ack."""
    await publish_n(
        conn,
        subject,
        count,
        start=start,
        data=lambda i: b"m%d" % i,
        msg_id=(lambda i: f"id-{i}") if headers else None,
        headers=(lambda i: {"X-Index": str(i)}) if headers else None,
    )


def source_options(url: str, stream: str, **extra: Any) -> dict[str, str]:
    """Spark options for the jetstream source."""
    opts = {"servers": url, "stream": stream}
    opts.update({k: str(v) for k, v in extra.items()})
    return opts
