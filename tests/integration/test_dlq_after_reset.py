"""A dead-lettered message delivered again (a consumer reset): docs/processing.md, "A
dead-lettered message delivered again".

Its ledger row was written with its letter: it is suppressed, neither handled nor
dead-lettered again (before: dead-lettered again, a second letter past the window, the
campaign's finding 24), and once its copy was applied it is not applied a second time
when its handler has been fixed (finding 28). A second letter of it (written by an
older release) is deleted by `dlq replay` while the first letter's copy is still to be
delivered, and replayed otherwise (applied once: the copies share a ledger key).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harness import publish_n
from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger
from oncestream.process import list_dead_letters, replay_dead_letters
from oncestream.process._replay import _publish, letter_identity
from oncestream.process._replayed import REPLAY_FOR
from oncestream.read import iter_messages
from oncestream.streams import ResetTarget, get_message, reset_consumer
from tests._support import effects
from tests.handlers import record, record_unless_7, record_unless_broken
from tests.integration.test_processor_max_deliver import _dead_letters

COUNT = 10


async def test_a_reset_past_a_dead_letter_suppresses_it(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=0.1)  # no window to hide behind
    await publish_n(conn, "jobs.x", COUNT, start=1)
    opts: dict[str, Any] = {"batch": 10, "ack_wait": 5, "expires": 1, "backoff": (0.05,)}
    options = ProcessorOptions(**opts, max_deliver=2, dead_letter_stream="DLQ")
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=options)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.dead_lettered >= 1 and s.applied >= COUNT - 1)
        await reset_consumer(conn, "JOBS", "w", ResetTarget(start=True))
        # Every message delivered again: all ten suppressed, seq 7 with them.
        await proc.wait_until(lambda s: s.suppressed >= COUNT)
    finally:
        proc.request_stop()
    async with asyncio.timeout(30):
        await task
    assert (proc.stats.dead_lettered, proc.stats.failed, proc.stats.suppressed) == (1, 2, COUNT)
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)


def _record_unless_original_7(msg: Any, tx: Any) -> None:
    """Fails stream seq 7 (the original), applies its replayed copy."""
    if msg.metadata.stream_seq == 7:
        raise ValueError("refusing the original of 7")
    record(msg, tx)


_OPTS: dict[str, Any] = {"batch": 10, "ack_wait": 5, "expires": 1, "backoff": (0.05,)}


async def _run_until(
    conn: Connection,
    db: Path,
    done: Any,
    reset: bool = False,
    handler: Any = _record_unless_original_7,
) -> Processor:
    options = ProcessorOptions(**_OPTS, max_deliver=2, dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", handler, ledger=SQLiteLedger(db), options=options)
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


async def _copies(conn: Connection) -> list[str]:
    return [
        str(m.header("Oncestream-Replay-Sequence"))
        async for m in iter_messages(conn, "JOBS")
        if m.header(REPLAY_FOR) == "w"
    ]


async def test_a_second_letter_whose_copy_is_still_to_come_is_not_replayed_again(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: the message dead-lettered again past the window while its first
    copy is still above the consumer's ack floor: `dlq replay` deletes the second letter
    without a second copy (the campaign's finding 24), and the copy is applied once."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=0.1)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    db = tmp_path / "l.db"
    await _run_until(conn, db, lambda s: s.dead_lettered >= 1 and s.applied >= COUNT - 1)
    (first,) = await list_dead_letters(conn, "DLQ")
    stored = await get_message(conn, "DLQ", seq=first.seq)
    assert (await replay_dead_letters(conn, "DLQ")).replayed == [first.seq]  # copy: seq 11
    # The letter again, byte for byte as the Processor writes it when the message fails
    # again, once the window has passed (a time the server keeps, no event to await:
    # bounded retries while the server still calls it a duplicate).
    headers = {k: v[0] for k, v in stored.headers.items()}
    for _ in range(100):
        if not (await _publish(conn, first.dlq_subject, stored.data, headers)).get("duplicate"):
            break
        await asyncio.sleep(0.05)
    (second,) = await list_dead_letters(conn, "DLQ")
    assert second.seq != first.seq and letter_identity(second) == letter_identity(first)
    report = await replay_dead_letters(conn, "DLQ")
    assert (report.replayed, report.already_replayed) == ([], [second.seq]), report
    assert await list_dead_letters(conn, "DLQ") == []
    assert await _copies(conn) == ["7"]
    again = await _run_until(conn, db, lambda s: s.applied >= 1)
    assert again.stats.applied == 1 and effects(db) == (COUNT, COUNT)


async def test_a_replayed_message_delivered_again_after_its_fix_is_not_applied_again(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: seq 7 fails and is dead-lettered, its handler is fixed, `dlq
    replay` applies its copy; then a reset delivers 1..11 again. Before, seq 7 (never
    applied under its own key) was applied a second time: finding 28."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    db = tmp_path / "l.db"
    broken = {7}
    handler = record_unless_broken(broken)

    def run_until(done: Any, reset: bool = False) -> Any:
        return _run_until(conn, db, done, reset, handler)

    await run_until(lambda s: s.dead_lettered >= 1 and s.applied >= COUNT - 1)
    (letter,) = await list_dead_letters(conn, "DLQ")
    assert (await replay_dead_letters(conn, "DLQ")).replayed == [letter.seq]
    broken.clear()  # the handler is fixed
    assert (await run_until(lambda s: s.applied >= 1)).stats.applied == 1  # the copy
    again = await run_until(lambda s: s.suppressed >= COUNT + 1, reset=True)
    assert (again.stats.applied, again.stats.suppressed) == (0, COUNT + 1), again.stats
    assert effects(db) == (COUNT, COUNT)
