"""A dead-lettered message delivered again (a consumer reset): docs/processing.md, "A
dead-lettered message delivered again".

It fails again and is dead-lettered again; within the dead-letter stream's duplicate
window the server de-duplicates the second letter, so the stream holds one. (Past the
window a second letter is stored: the campaign's trial 36, finding 24, a documented
limit; both copies would share one ledger key.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harness import publish_n
from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger
from oncestream.streams import ResetTarget, reset_consumer
from tests._support import effects
from tests.handlers import record_unless_7
from tests.integration.test_processor_max_deliver import _dead_letters

COUNT = 10


async def test_a_reset_within_the_window_leaves_one_letter(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    opts: dict[str, Any] = {"batch": 10, "ack_wait": 5, "expires": 1, "backoff": (0.05,)}
    options = ProcessorOptions(**opts, max_deliver=2, dead_letter_stream="DLQ")
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=options)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.dead_lettered >= 1 and s.applied >= COUNT - 1)
        await reset_consumer(conn, "JOBS", "w", ResetTarget(start=True))
        # Every message delivered again: the nine applied suppressed, seq 7 failing again.
        await proc.wait_until(lambda s: s.suppressed >= COUNT - 1 and s.dead_lettered >= 2)
    finally:
        proc.request_stop()
    async with asyncio.timeout(30):
        await task
    assert (proc.stats.dead_lettered, proc.stats.failed) == (2, 4), proc.stats
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)
