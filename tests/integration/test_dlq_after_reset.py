"""A dead-lettered message delivered again (a consumer reset) is not dead-lettered again.

Campaign of 2026-11-30 (trial 36, seed 52; stream windows short): a consumer reset to
the stream's start delivered messages dead-lettered earlier; the `Processor` failed them
again and wrote a second letter, which the dead-letter stream's duplicate window no
longer de-duplicated: a second replayed copy. A dead letter now writes the message's
ledger row (a replayed copy's excepted, so that its next replay is applied): delivered
again, it is suppressed like an applied one. Shown failing before the fix
(``dead_lettered`` 2, ``failed`` 4).
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


async def test_a_reset_does_not_dead_letter_a_message_twice(
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
        # Every message delivered again: the nine applied and seq 7 found in the ledger.
        await proc.wait_until(lambda s: s.suppressed >= COUNT, timeout=20)
    finally:
        proc.request_stop()
    async with asyncio.timeout(30):
        await task
    assert (proc.stats.dead_lettered, proc.stats.failed) == (1, 2), proc.stats
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)
