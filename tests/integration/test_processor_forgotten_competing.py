"""a nak'ed message applied by ANOTHER instance of the same consumer.

Several Processors may share one durable consumer (PostgreSQL ledger, docs/processing.md).
Instance A's handler fails seq 1 and A hands it back (nak); the server redelivers it to
instance B, which applies it and acks: the consumer's ack floor moves past 1. Nothing
was forgotten by the server. A's watcher sees the floor past its nak and settles it,
finding it in the shared ledger: no ``exhausted``/``forgotten`` count, no error log, no
dead letter (a breaker's reproducer: all three happened before the fix).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import oncestream.process._handedback as handedback
from harness import publish_n
from oncestream import ConnectOptions, PostgresLedger, Processor, ProcessorOptions, connect
from tests.handlers import record
from tests.integration.test_processor_max_deliver import _dead_letters

pytestmark = pytest.mark.postgres


def fails_on_a(msg: Any, tx: Any) -> None:
    raise RuntimeError(f"instance A cannot handle {msg.data!r}")


async def test_a_nak_applied_by_a_competing_instance_is_not_forgotten(  # type: ignore[no-untyped-def]
    conn, make_stream, options: ConnectOptions, postgres_url: str, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)
    reads: list[tuple[int, list[tuple[int, int]]]] = []
    floor_passed = asyncio.Event()
    original = handedback.HandedBack.forgotten

    def spy(self, ack_floor: int, read_at: float):  # type: ignore[no-untyped-def]
        gone = original(self, ack_floor, read_at)
        reads.append((ack_floor, gone))
        if ack_floor >= 1:
            floor_passed.set()
        return gone

    monkeypatch.setattr(handedback.HandedBack, "forgotten", spy)
    caplog.set_level(logging.WARNING)
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await publish_n(conn, "jobs.x", 1, start=1)
    opts = ProcessorOptions(
        batch=10, ack_wait=5, expires=1, prune_interval=0, backoff=(0.2,), max_deliver=100,
        dead_letter_stream="DLQ",
    )  # fmt: skip
    conn_b = await connect(options)
    a = Processor(conn, "JOBS", "w", fails_on_a, ledger=PostgresLedger(postgres_url), options=opts)
    b = Processor(conn_b, "JOBS", "w", record, ledger=PostgresLedger(postgres_url), options=opts)
    task_a = asyncio.create_task(a.run())
    task_b: asyncio.Task[Any] | None = None
    try:
        await a.wait_until(lambda s: s.failed >= 1, timeout=20)  # A nak'ed seq 1
        task_b = asyncio.create_task(b.run())
        await b.wait_until(lambda s: s.applied >= 1, timeout=30)  # B got it and applied it
        await b.wait_caught_up(timeout=30)  # ... and the server took its ack
        info = await conn.consumer_info("JOBS", "w")
        assert info["ack_floor"]["stream_seq"] >= 1, info
        async with asyncio.timeout(10):
            await floor_passed.wait()  # A's watcher read the floor past seq 1
        await asyncio.sleep(0)  # let A's drop watcher take what was queued
        await a.wait_until(lambda s: True, timeout=1)
    finally:
        a.request_stop()
        b.request_stop()
        await asyncio.gather(task_a, *(t for t in (task_b,) if t), return_exceptions=True)
        await conn_b.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert await _dead_letters(conn) == []
    assert (a.stats.exhausted, a.stats.forgotten) == (0, 0), (a.stats, errors)
    assert not [e for e in errors if "stopped delivering" in e], errors
