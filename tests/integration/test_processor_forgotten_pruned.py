"""A message the server forgot is dead-lettered even when pruning runs.

Campaign of 2026-11-30 (trials 44, 59 and 81; seed 52; docs/guarantees.md, finding 31):
with pruning on, a failing message the Processor had handed back (nak) and the server
then forgot (its ack floor moved past it: nats-io/nats-server#5727) was pruned over,
its ledger's prune horizon following that ack floor. Its settling then found it
"applied" and finished it silently: neither applied nor dead-lettered. Pruning now
stays below a message handed back and not finished. A consumer reset forward puts the
real server in the forgetting state (as in test_processor_forgotten_nak.py); pruning
runs every 0.1 s and the Processor looks for forgotten messages only every 2 s, so a
prune round always comes first. Fails with the bound removed from the prune loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import oncestream.process._handedback as handedback
from harness import publish_n
from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger
from oncestream.streams import ResetTarget, reset_consumer
from tests._support import effects
from tests.handlers import record_unless_7
from tests.integration.test_processor_max_deliver import _dead_letters

COUNT = 10


@pytest.fixture(autouse=True)
def _slow_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 2.0)


async def test_a_forgotten_nak_is_dead_lettered_while_pruning_runs(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    db = tmp_path / "l.db"
    opts = ProcessorOptions(
        batch=10, ack_wait=5, expires=1, backoff=(60.0,), dead_letter_stream="DLQ",
        prune_interval=0.1, prune_grace=0.1,
    )  # fmt: skip
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=SQLiteLedger(db), options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.failed >= 1 and s.applied >= COUNT - 1, timeout=20)
        await reset_consumer(conn, "JOBS", "w", ResetTarget(seq=COUNT + 1))  # past seq 7
        # Rounds prune 1..6 and stop there; the settling comes later and finds 7 unapplied.
        await proc.wait_until(lambda s: s.pruned >= 6 and s.dead_lettered >= 1, timeout=20)
    finally:
        proc.request_stop()
    async with asyncio.timeout(30):
        await task
    # Pruned up to 6 only: 8..10 (above the held 7) kept their rows.
    assert (proc.stats.forgotten, proc.stats.dead_lettered, proc.stats.pruned) == (1, 1, 6)
    assert await _dead_letters(conn) == [7]
    assert effects(db) == (COUNT - 1, COUNT - 1)
