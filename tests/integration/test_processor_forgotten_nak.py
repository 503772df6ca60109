"""A message the Processor handed back (nak) and the server then forgot is never lost.

Campaign of 2026-11-29 (trials 8, 20, 36; seed 52): after nats-server restarted from a
full disk, a consumer's ack floor had moved past messages the Processor had nak'ed,
waiting for their redelivery: nothing pending, never delivered again, neither applied
nor dead-lettered, and nothing said so (nats-io/nats-server#5727 reports the same of
nak'ed messages). Here a consumer reset forward puts the real server in that state:
its ack floor past a nak'ed message. The Processor notices the floor passed a message
it never finished and settles it as a message the server dropped: dead-lettered, or,
without a dead-letter stream, the consumer moved back to it and the run failed saying
so, the next run applying it once. Both shown failing before the fix (the run went on
"caught up" with seq 7 neither applied nor dead-lettered).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import oncestream.process._handedback as handedback
from harness import publish_n
from oncestream import Connection, MaxDeliverError, Processor, ProcessorOptions, SQLiteLedger
from oncestream.streams import ResetTarget, reset_consumer
from tests._support import effects
from tests.handlers import record, record_unless_7
from tests.integration.test_processor_max_deliver import _dead_letters

#: Messages 1..10; the handler fails on 7 (until it is fixed).
COUNT = 10


def _opts(**kw: Any) -> ProcessorOptions:
    # A long backoff: seq 7 waits on the server for its redelivery while the test acts.
    base: dict[str, Any] = {"batch": 10, "ack_wait": 5, "expires": 1, "backoff": (60.0,)}
    base.update(prune_interval=0)
    base.update(kw)
    return ProcessorOptions(**base)


@pytest.fixture(autouse=True)
def _quick_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)


async def _forgotten_by_the_server(conn: Connection, proc: Processor) -> None:
    """Seq 7 handed back, the rest applied; then the consumer's ack floor moved past 7."""
    await proc.wait_until(lambda s: s.failed >= 1 and s.applied >= COUNT - 1, timeout=20)
    await reset_consumer(conn, "JOBS", "w", ResetTarget(seq=8))
    info = await conn.consumer_info("JOBS", "w")  # 8..10 come again (suppressed): 7 not
    assert info["ack_floor"]["stream_seq"] >= 7, info


async def test_a_forgotten_nak_is_dead_lettered(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await _forgotten_by_the_server(conn, proc)
        await proc.wait_until(lambda s: s.dead_lettered >= 1, timeout=20)
    finally:
        proc.request_stop()
    async with asyncio.timeout(30):
        await task
    assert (proc.stats.forgotten, proc.stats.exhausted, proc.stats.dead_lettered) == (1, 1, 1)
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)


async def test_a_forgotten_nak_without_dead_letters_is_delivered_again(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=_opts())
    task = asyncio.create_task(proc.run())
    try:
        await _forgotten_by_the_server(conn, proc)
        async with asyncio.timeout(30):
            await asyncio.wait({task})
    finally:
        proc.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await task
    assert failed.value.seqs == (7,)
    assert "ack floor moved past it" in str(failed.value)
    assert "moved back to seq 7" in str(failed.value)
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)
    fixed = Processor(conn, "JOBS", "w", record, ledger=ledger, options=_opts())
    again = asyncio.create_task(fixed.run())
    try:
        await fixed.wait_until(lambda s: s.applied >= 1, timeout=20)
    finally:
        fixed.request_stop()
    async with asyncio.timeout(30):
        await again
    assert fixed.stats.applied == 1
    assert effects(tmp_path / "l.db") == (COUNT, COUNT)
