"""Subprocess for the AtomicPublisher kill test: publishes ids, SIGKILLs itself mid-run.

Usage: python -m tests.chaos._atomic_worker URL STREAM N KILL_AT

Rows ``id-0`` .. ``id-<N-1>`` (subjects ``at.0`` .. ``at.2``) go to
``AtomicPublisher.publish`` in calls of 1,000; right after the call that hands
over row ``KILL_AT`` the process SIGKILLs itself, with up to ``max_inflight``
batches sent and not yet acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from oncestream import ConnectOptions, connect
from oncestream.publish import AtomicPublisher, PublisherOptions


def rows(n: int) -> tuple[list[str], list[bytes], list[str]]:
    ids = [f"id-{i}" for i in range(n)]
    return [f"at.{i % 3}" for i in range(n)], [i.encode() for i in ids], ids


async def main(url: str, stream: str, n: int, kill_at: int) -> None:
    subjects, datas, ids = rows(n)
    conn = await connect(ConnectOptions(servers=(url,)))
    async with AtomicPublisher(conn, PublisherOptions(stream=stream)) as pub:
        for start in range(0, n, 1000):
            end = start + 1000
            await pub.publish(subjects[start:end], datas[start:end], ids[start:end])
            if end >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    url, stream, n, kill_at = sys.argv[1:5]
    asyncio.run(main(url, stream, int(n), int(kill_at)))
