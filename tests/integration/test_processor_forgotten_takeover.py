"""A message nak'ed by an instance that then stopped, and that the server forgot, is
dead-lettered by the instance that takes over.

Campaign of 2026-11-30 (trial 36, seed 52; docs/guarantees.md, finding 32): the
PostgreSQL pair's active instance nak'ed failing messages; a restart of nats-server from
a full disk moved the consumer's ack floor past them (nats-io/nats-server#5727) and the
pin to the other instance, whose takeover reset the consumer to that floor. The list
of what the first had handed back went with its demotion: 18 messages neither applied
nor dead-lettered, nothing logged. The list is now recorded in the ledger and read by
the instance that takes over. Here: A fails seq 7 (60 s backoff), records it and stops; a consumer
reset forward past 7 puts the server in the forgetting state (as in
test_processor_forgotten_nak.py); B takes over, reads A's record and dead-letters 7.
Fails when the record is not read (``Ledger.handed_back`` returning nothing).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import oncestream.process._handedback as handedback
from harness import publish_n
from oncestream import (
    Connection,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from oncestream.ledger._internal import read_handed_back
from oncestream.streams import ResetTarget, reset_consumer
from tests.handlers import record_unless_7
from tests.integration.test_processor_max_deliver import _dead_letters


@pytest.fixture(autouse=True)
def _quick_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)
    monkeypatch.setattr(handedback, "RECORD_INTERVAL", 0.2)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "l.db")
    return str(request.getfixturevalue("postgres_url"))


async def recorded(url: str, seqs: list[int]) -> None:
    """Wait (bounded) until the ledger's record of handed-back messages is ``seqs``: it is
    written by the Processor's background task, with no event to await from here."""
    for _ in range(100):
        if await asyncio.to_thread(read_handed_back, url, "JOBS", "w") == seqs:
            return
        await asyncio.sleep(0.05)
    assert await asyncio.to_thread(read_handed_back, url, "JOBS", "w") == seqs


def _opts() -> ProcessorOptions:
    return ProcessorOptions(
        batch=10, ack_wait=5, expires=1, backoff=(60.0,), dead_letter_stream="DLQ",
        prune_interval=0.1, prune_grace=0.1, priority_group="g", pinned_ttl=2,
    )  # fmt: skip


async def _start(proc: Processor) -> asyncio.Task[Any]:
    task = asyncio.create_task(proc.run())
    await proc.wait_running()
    return task


async def test_a_stopped_instances_forgotten_nak_is_dead_lettered_by_the_next(
    conn: Connection, options: Any, make_stream: Any, ledger_url: str
) -> None:
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", 10, start=1)
    url = ledger_url

    def make() -> Any:
        return PostgresLedger(url) if url.startswith("postgresql") else SQLiteLedger(url)

    a = Processor(conn, "JOBS", "w", record_unless_7, ledger=make(), options=_opts())
    task_a = await _start(a)
    await a.wait_until(lambda s: s.failed >= 1 and s.applied >= 9, timeout=20)
    await recorded(url, [7])  # within RECORD_INTERVAL (here 0.2 s) of the nak
    await a.stop()
    await task_a
    await reset_consumer(conn, "JOBS", "w", ResetTarget(seq=11))  # the server forgets 7
    async with await connect(options) as conn_b:
        b = Processor(conn_b, "JOBS", "w", record_unless_7, ledger=make(), options=_opts())
        task_b = await _start(b)
        try:
            await publish_n(conn, "jobs.x", 10, start=11)  # a pin is given with messages
            await b.wait_until(lambda s: s.forgotten >= 1 and s.dead_lettered >= 1, timeout=20)
            # 7 settled: it leaves the record; 14 (the handler fails it too) is B's own nak.
            await recorded(url, [14])
        finally:
            b.request_stop()
        async with asyncio.timeout(30):
            await task_b
    assert (b.stats.forgotten, b.stats.dead_lettered) == (1, 1), b.stats
    assert await _dead_letters(conn) == [7]
