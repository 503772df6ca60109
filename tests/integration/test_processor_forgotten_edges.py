"""Forgotten naks at the edges (a full dead-letter stream, ack policy all, a stream
purge, a stop mid-settle), from a breaker's attempts on the feature: the purge cases
(the ack frontier stuck behind a purged message; ``wait_until`` never woken) and the
full dead-letter stream's wording failed before their fixes.

The server is put in the "forgotten" state as tests/integration/test_processor_forgotten_nak.py
does: seq 7 nak'ed (long backoff), then a consumer reset forward past it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from harness import publish_n
from oncestream import Connection, MaxDeliverError, Processor, SQLiteLedger
from oncestream.streams import ResetTarget, reset_consumer
from tests._support import effects
from tests.handlers import record, record_unless_7
from tests.integration.test_processor_forgotten_nak import (  # noqa: F401 - the fixture
    COUNT,
    _forgotten_by_the_server,
    _opts,
    _quick_check,
)
from tests.integration.test_processor_max_deliver import (
    _dead_letters,
    _full_dlq,
    _HeldCommitLedger,
    released_at_stop,
)


async def test_a_forgotten_nak_with_a_full_dead_letter_stream(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The dead letter refused: moved back to 7, the run fails saying why it was dropped
    (the ack floor, not max_deliver); the next run (handler fixed) applies 7 once."""
    await make_stream("JOBS", ("jobs.>",))
    await _full_dlq(conn)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await _forgotten_by_the_server(conn, proc)
        async with asyncio.timeout(30):
            await asyncio.wait({task})
    finally:
        proc.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await task
    text = str(failed.value)
    assert failed.value.seqs == (7,), text
    assert "moved back to seq 7" in text, text
    info = await conn.consumer_info("JOBS", "w")
    assert info["ack_floor"]["stream_seq"] == 6, info
    fixed = Processor(conn, "JOBS", "w", record, ledger=ledger, options=opts)
    task = asyncio.create_task(fixed.run())
    try:
        await fixed.wait_until(lambda s: s.applied >= 1, timeout=20)
    finally:
        fixed.request_stop()
    await task
    assert effects(tmp_path / "l.db") == (COUNT, COUNT)
    # Last: the wording (the message was not dropped at max_deliver).
    assert "max_deliver" not in text, text


async def test_a_forgotten_nak_with_ack_policy_all(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Ack policy all: 7 dead-lettered, and the acks go on past it (nothing left pending
    after more messages)."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(dead_letter_stream="DLQ", ack_policy="all")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await _forgotten_by_the_server(conn, proc)
        await proc.wait_until(lambda s: s.dead_lettered >= 1, timeout=20)
        await publish_n(conn, "jobs.x", 5, start=15)  # 15..19: none fails
        await proc.wait_until(lambda s: s.applied >= COUNT - 1 + 5, timeout=20)
        async with asyncio.timeout(20):
            while True:
                info = await conn.consumer_info("JOBS", "w")
                if not info["num_ack_pending"] and not info["num_pending"]:
                    break
                await asyncio.wait({task}, timeout=0.2)
                assert not task.done()
    finally:
        proc.request_stop()
    await task
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1 + 5, COUNT - 1 + 5)


@pytest.mark.parametrize("policy", ["explicit", "all"])
async def test_a_stream_purge_with_a_nak_outstanding(
    conn: Connection, make_stream, tmp_path: Path, policy: str, caplog
) -> None:  # type: ignore[no-untyped-def]
    """The stream purged while 7 waits for its redelivery: the Processor goes on; what
    is published after is applied and acked (nothing stuck behind 7)."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(dead_letter_stream="DLQ", ack_policy=policy)
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.failed >= 1 and s.applied >= COUNT - 1, timeout=20)
        await conn.api("STREAM.PURGE.JOBS", {})
        await publish_n(conn, "jobs.x", 5, start=15)  # 15..19: none fails
        await proc.wait_until(lambda s: s.applied >= COUNT - 1 + 5, timeout=20)
        info: dict[str, Any] = {}
        for _ in range(100):  # 20 s at most (the ack wait is 5 s)
            info = await conn.consumer_info("JOBS", "w")
            if not info["num_ack_pending"] and not info["num_pending"]:
                break
            await asyncio.wait({task}, timeout=0.2)
            assert not task.done()
        assert (info["num_ack_pending"], info["num_pending"]) == (0, 0), (info, proc.stats)
    finally:
        proc.request_stop()
    await task
    assert await _dead_letters(conn) == []


class _ArmedLedger(_HeldCommitLedger):
    """The first transaction begun once ``armed`` (the forgotten 7's settling: nothing
    else is delivered after a reset to the end) commits only once the run is stopping."""

    armed = False

    def begin(self) -> Any:
        tx = SQLiteLedger.begin(self)
        if self.armed and not self.committing.is_set():
            self.hold(tx)
        return tx


async def test_a_stop_while_a_forgotten_nak_is_dead_lettered_finishes_it(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    stopping = threading.Event()
    holder: list[Processor] = []
    ledger = _ArmedLedger(tmp_path / "l.db", holder, stopping)
    opts = _opts(dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    holder.append(proc)
    task = asyncio.create_task(proc.run())
    with released_at_stop(stopping):
        try:
            await proc.wait_until(lambda s: s.failed >= 1 and s.applied >= COUNT - 1, timeout=20)
            ledger.armed = True
            await reset_consumer(conn, "JOBS", "w", ResetTarget(end=True))  # past the nak'ed 7
            assert await asyncio.to_thread(ledger.committing.wait, 30)
            proc.request_stop()  # the drop watcher's log at the stop releases the commit
            async with asyncio.timeout(60):
                await task
        finally:
            proc.request_stop()
            stopping.set()
    assert (proc.stats.forgotten, proc.stats.dead_lettered) == (1, 1), proc.stats
    assert await _dead_letters(conn) == [7]
    info = await conn.consumer_info("JOBS", "w")
    assert info["ack_floor"]["stream_seq"] >= COUNT, info  # not moved back


async def test_a_purged_nak_is_seen_by_wait_until(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The purged 7 is counted (forgotten, exhausted): ``wait_until`` on that count
    returns (the settling of a message no longer in the stream signals progress)."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=_opts())
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.failed >= 1 and s.applied >= COUNT - 1, timeout=20)
        await conn.api("STREAM.PURGE.JOBS", {})
        await proc.wait_until(lambda s: s.forgotten >= 1, timeout=10)
    finally:
        proc.request_stop()
    await task
