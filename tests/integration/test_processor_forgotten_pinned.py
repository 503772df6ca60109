"""a pinned pair, the pin moves while the old active one's nak is outstanding.

A (active) fails seq 7 and hands it back (nak, long backoff). The pin moves to B (a
``CONSUMER.UNPIN``, as after a pin that expired): B fences, resets the consumer to its
ack floor, and applies 7. A keeps running as the standby. Nothing was forgotten by the
server; A must not report seq 7 as a message the server stopped delivering (a
breaker's reproducer: an ERROR and the exhausted/forgotten counts before the fix; A's
watcher may still look at 7, and its settling is fenced off as the standby's).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import oncestream.process._handedback as handedback
from harness import publish_n
from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger, connect
from tests._support import effects
from tests.handlers import record, record_unless_7


async def test_a_standby_does_not_report_its_old_nak_as_forgotten(  # type: ignore[no-untyped-def]
    conn: Connection, options, make_stream, tmp_path: Path, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)
    reads: list[tuple[int, list[tuple[int, int]]]] = []
    read = asyncio.Event()
    original = handedback.HandedBack.forgotten

    def spy(self, ack_floor: int, read_at: float):  # type: ignore[no-untyped-def]
        gone = original(self, ack_floor, read_at)
        reads.append((ack_floor, gone))
        if ack_floor >= 7:
            read.set()
        return gone

    monkeypatch.setattr(handedback.HandedBack, "forgotten", spy)
    caplog.set_level(logging.WARNING)
    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    opts = ProcessorOptions(
        batch=50, ack_wait=30, prune_interval=0, priority_group="g", pinned_ttl=2,
        backoff=(60.0,),
    )  # fmt: skip
    a = Processor(conn, "JOBS", "w", record_unless_7, ledger=SQLiteLedger(db), options=opts)
    task_a = asyncio.create_task(a.run())
    await a.wait_running()
    await publish_n(conn, "jobs.x", 10, start=1)
    await a.wait_until(lambda s: s.applied == 9 and s.failed == 1)
    conn_b = await connect(options)
    b = Processor(conn_b, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
    task_b = asyncio.create_task(b.run())
    try:
        await b.wait_running()
        nudge = 11
        for _ in range(10):  # bounded: the pin goes to whichever request waits first
            await conn.api("CONSUMER.UNPIN.JOBS.w", {"group": "g"})
            await publish_n(conn, "jobs.x", 1, start=nudge)
            nudge += 1
            try:
                await b.wait_until(lambda s: s.takeovers >= 1, timeout=5)
                break
            except Exception:
                continue
        await b.wait_until(lambda s: s.applied >= 1 + (nudge - 11), timeout=20)  # 7 and nudges
        floor = 0
        for _ in range(100):  # bounded: applied counts at the ledger's commit, before the ack lands
            floor = (await conn.consumer_info("JOBS", "w"))["ack_floor"]["stream_seq"]
            if floor >= 7:
                break
            await asyncio.sleep(0.05)
        assert floor >= 7, floor
        async with asyncio.timeout(10):
            await read.wait()  # A's watcher read the floor past 7 (it held 7 until then)
        await asyncio.sleep(0)
    finally:
        a.request_stop()
        b.request_stop()
        await asyncio.gather(task_a, task_b, return_exceptions=True)
        await conn_b.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert effects(db)[0] == effects(db)[1]
    assert b.stats.takeovers == 1, b.stats
    assert (a.stats.exhausted, a.stats.forgotten) == (0, 0), (a.stats, reads, errors)
    assert not [e for e in errors if "stopped delivering" in e], errors
