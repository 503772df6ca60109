"""A dead-lettered message delivered again (a consumer reset): docs/processing.md, "A
dead-lettered message delivered again".

It fails again and is dead-lettered again; within the dead-letter stream's duplicate
window the server de-duplicates the second letter, so the stream holds one. Past the
window a second letter is stored (the campaign's trial 36, finding 24), and `dlq replay`
deletes it without a second copy: it finds the first letter's copy in the stream.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harness import publish_n
from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger
from oncestream.process import list_dead_letters, replay_dead_letters
from oncestream.process._replay import letter_identity
from oncestream.process._replayed import REPLAY_FOR
from oncestream.read import iter_messages
from oncestream.streams import ResetTarget, reset_consumer
from tests._support import effects
from tests.handlers import record, record_unless_7
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


def _record_unless_original_7(msg: Any, tx: Any) -> None:
    """Fails stream seq 7 (the original), applies its replayed copy."""
    if msg.metadata.stream_seq == 7:
        raise ValueError("refusing the original of 7")
    record(msg, tx)


async def test_a_second_letter_of_a_replayed_message_is_not_replayed_again(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: past the window the message is dead-lettered again, and `dlq
    replay` finds the first letter's copy in the stream: it deletes the second letter
    without a second copy (the campaign's finding 24)."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=1)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    opts: dict[str, Any] = {"batch": 10, "ack_wait": 5, "expires": 1, "backoff": (0.05,)}
    options = ProcessorOptions(**opts, max_deliver=2, dead_letter_stream="DLQ")
    db = tmp_path / "l.db"

    async def run_until(done: Any, reset: bool = False) -> Processor:
        ledger = SQLiteLedger(db)
        proc = Processor(
            conn, "JOBS", "w", _record_unless_original_7, ledger=ledger, options=options
        )
        task = asyncio.create_task(proc.run())
        try:
            if reset:
                await proc.wait_running()
                await reset_consumer(conn, "JOBS", "w", ResetTarget(start=True))
            await proc.wait_until(done)
        finally:
            proc.request_stop()
        async with asyncio.timeout(30):
            await task
        return proc

    await run_until(lambda s: s.dead_lettered >= 1 and s.applied >= COUNT - 1)
    (first,) = await list_dead_letters(conn, "DLQ")
    assert (await replay_dead_letters(conn, "DLQ")).replayed == [first.seq]
    # The dead-letter stream's window passes: a time, not an event to await.
    await asyncio.sleep(1.5)
    # The reset delivers 1..10 and the copy (11) again: 7 fails and is dead-lettered anew.
    again = await run_until(lambda s: s.dead_lettered >= 1 and s.applied >= 1, reset=True)
    assert (again.stats.applied, again.stats.dead_lettered) == (1, 1), again.stats
    (second,) = await list_dead_letters(conn, "DLQ")
    assert second.seq != first.seq and letter_identity(second) == letter_identity(first)

    report = await replay_dead_letters(conn, "DLQ")
    assert (report.replayed, report.already_replayed) == ([], [second.seq]), report
    assert await list_dead_letters(conn, "DLQ") == []
    copies = [m async for m in iter_messages(conn, "JOBS") if m.header(REPLAY_FOR) == "w"]
    assert [c.header("Oncestream-Replay-Sequence") for c in copies] == ["7"]
    assert effects(db) == (COUNT, COUNT)
