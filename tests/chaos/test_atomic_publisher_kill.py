"""An AtomicPublisher SIGKILLed mid-run and run again at once stores every id once (issue 38)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from oncestream import Connection
from oncestream.publish import AtomicPublisher, PublisherOptions
from oncestream.server import NatsServer
from tests.chaos._atomic_worker import rows
from tests.integration.test_publisher import read_back

ROOT = Path(__file__).resolve().parents[2]
N, KILL_AT = 60_000, 40_000


async def test_killed_mid_run_and_run_again_at_once_stores_each_id_once(
    nats_server: NatsServer, conn: Connection, make_stream
) -> None:
    """The re-run's chunks up to the kill are refused (10201) for ids the dead run stored.

    Shown failing before the stream was searched for those ids: the re-run sent
    them one row per batch and slowed to a few hundred rows a second, so it
    reached later rows after the 30 s window and stored them again.
    """
    await make_stream("AT", ("at.>",), duplicate_window=30, allow_atomic=True)
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.chaos._atomic_worker",
        nats_server.url,
        "AT",
        str(N),
        str(KILL_AT),
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(120):
            _, err = await worker.communicate()
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    assert worker.returncode == -signal.SIGKILL, err.decode(errors="replace")[-2000:]
    before = int((await conn.stream_info("AT"))["state"]["messages"])
    assert 0 < before < N
    async with AtomicPublisher(conn, PublisherOptions(stream="AT")) as pub:  # at once
        await pub.publish(*rows(N))
    counts = Counter(m.msg_id for m in await read_back(conn, "AT"))
    twice = sorted(str(k) for k, n in counts.items() if n > 1)
    assert (len(counts), sum(counts.values()), len(twice)) == (N, N, 0), twice[:5]
    s = pub.stats
    # At most max_inflight (4) batches were unsettled at the kill.
    assert s.duplicates >= KILL_AT - 4 * 1000 and s.stored + s.duplicates == N, s
    assert s.singles == 0, s
