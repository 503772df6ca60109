"""A Processor's delayed retry is kept by the server: it survives a restart of the client."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from harness import publish_n
from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger
from tests._support import effects
from tests.handlers import always_fails, record


async def test_a_backoff_retry_fires_after_the_processor_was_replaced(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 1)
    db = tmp_path / "l.db"
    opts = ProcessorOptions(batch=10, ack_wait=60, backoff=(3.0,), prune_interval=0)
    failed_at: list[float] = []

    def fails(msg: Any, tx: Any) -> None:
        failed_at.append(time.monotonic())
        raise RuntimeError("downstream unavailable")

    first = Processor(conn, "JOBS", "w", fails, ledger=SQLiteLedger(db), options=opts)
    task = asyncio.create_task(first.run())
    await first.wait_until(lambda s: s.failed == 1)
    await first.stop()  # the nak with its 3 s delay was sent; this client is gone
    await task
    second = Processor(conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
    task = asyncio.create_task(second.run())
    await second.wait_until(lambda s: s.applied == 1, timeout=20)
    applied_at = time.monotonic()
    await second.stop()
    await task
    assert effects(db) == (1, 1)
    # The nak's 3 s delay holds the message unacknowledged with nobody pulling: the new
    # Processor takes it back at once (docs/production.md, "Restarting a Processor"),
    # not after the 60 s ack wait.
    assert second.stats.reclaimed == 1
    assert applied_at - failed_at[0] < 30


async def test_a_dead_letter_is_not_stored_in_a_stream_that_took_over_its_subject(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The dead-letter publish carries Nats-Expected-Stream: a moved subject is refused."""
    await make_stream("JOBS", ("jobs.>",))
    opts = ProcessorOptions(
        batch=10, max_deliver=2, backoff=(0.05,), dead_letter_stream="DLQ", prune_interval=0
    )
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", always_fails, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    await proc.wait_running()
    # The dead-letter subject moves to another stream while the Processor runs.
    await conn.api("STREAM.DELETE.DLQ", {})
    await make_stream("OTHER", ("DLQ.>",))
    await publish_n(conn, "jobs.x", 1)
    await proc.wait_until(lambda s: s.failed >= 4)  # max_deliver reached, the DLQ refused twice
    await proc.stop()
    await task
    assert proc.stats.dead_lettered == 0
    assert (await conn.stream_info("OTHER"))["state"]["messages"] == 0


async def test_a_stored_message_schedule_is_not_handed_to_the_handler(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`dlq replay --in` stores a schedule in the original stream; a Processor skips it."""
    await conn.api(
        "STREAM.CREATE.JOBS",
        {"name": "JOBS", "subjects": ["jobs.>", "sched.>"], "allow_msg_schedules": True},
    )
    js = conn.nc.jetstream()
    await js.publish(
        "sched.one",
        b"7",
        headers={"Nats-Schedule": "@at 2099-01-01T00:00:00Z", "Nats-Schedule-Target": "jobs.x"},
    )
    await publish_n(conn, "jobs.x", 1)
    db = tmp_path / "l.db"
    opts = ProcessorOptions(batch=10, prune_interval=0)
    proc = Processor(conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
    task = asyncio.create_task(proc.run())
    await proc.wait_caught_up()
    await proc.stop()
    await task
    assert (proc.stats.applied, proc.stats.schedules_skipped) == (1, 1)
    assert effects(db) == (1, 1)
