"""Three Processors share one durable consumer and one PostgreSQL ledger: each message once."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from harness import publish_n
from oncestream import ConnectOptions, PostgresLedger, Processor, ProcessorOptions, connect
from tests.handlers import record

pytestmark = pytest.mark.postgres

TOTAL = 3000


def slow_record(msg, tx) -> None:  # type: ignore[no-untyped-def]
    record(msg, tx)
    if int(msg.data) % 500 == 0:
        # Longer than ack_wait on some messages: in-progress acks or a
        # redelivery to another instance; either way it must apply once.
        time.sleep(1.5)


async def test_three_instances_apply_each_message_once(  # type: ignore[no-untyped-def]
    conn, make_stream, options: ConnectOptions, postgres_url: str
) -> None:
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", TOTAL)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")

    conns = [await connect(options) for _ in range(3)]
    opts = ProcessorOptions(batch=50, ack_wait=1, expires=5, prune_interval=0, max_ack_pending=500)
    procs = [
        Processor(
            c, "JOBS", "shared", slow_record, ledger=PostgresLedger(postgres_url), options=opts
        )
        for c in conns
    ]
    tasks = [asyncio.create_task(p.run()) for p in procs]
    try:
        async with asyncio.timeout(90):
            while True:
                await asyncio.sleep(0.2)
                for task in tasks:
                    if task.done():
                        await task
                info = await conn.consumer_info("JOBS", "shared")
                if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                    break
    finally:
        for p in procs:
            p.request_stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in conns:
            await c.close()
    with psycopg.connect(postgres_url) as check:
        count, distinct = check.execute(
            "SELECT count(*), count(DISTINCT id) FROM effects"
        ).fetchone()
    assert distinct == TOTAL and count == TOTAL
    assert sum(p.stats.applied for p in procs) == TOTAL
    assert all(p.stats.applied > 0 for p in procs), [p.stats.applied for p in procs]


async def test_async_handler_and_a_failure_with_postgres(
    conn, make_stream, postgres_url: str
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 200)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
    failed_once: set[int] = set()

    async def handler(msg, tx) -> None:  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        n = int(msg.data)
        tx.execute("INSERT INTO effects (id) VALUES (%s)", (n,))
        if n == 77 and n not in failed_once:
            failed_once.add(n)
            # A failed statement aborts the PostgreSQL transaction: the batch
            # must be rolled back and re-run per message without losing others.
            tx.execute("SELECT 1/0")

    opts = ProcessorOptions(batch=50, ack_wait=2, expires=5, prune_interval=0, backoff=(0.05,))
    proc = Processor(conn, "JOBS", "w", handler, ledger=PostgresLedger(postgres_url), options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.applied >= 200, timeout=30)
    finally:
        await proc.stop()
        await task
    with psycopg.connect(postgres_url) as check:
        count, distinct = check.execute(
            "SELECT count(*), count(DISTINCT id) FROM effects"
        ).fetchone()
    assert (count, distinct) == (200, 200)


async def test_a_pinned_processor_rides_out_its_ledger_sessions_end(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_url: str
) -> None:
    """PostgreSQL restarted (here: every session of the database ended) between batches.

    The active instance's next batch fails on its first statement, the owner check: a
    connection loss, retried on a new connection like any transient ledger failure.
    Before, the owner check's raw driver error ended the Processor (exit 1 from the CLI).
    """
    await make_stream("JOBS", ("jobs.>",))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
    opts = ProcessorOptions(batch=50, ack_wait=30, prune_interval=0, priority_group="g")
    proc = Processor(conn, "JOBS", "w", record, ledger=PostgresLedger(postgres_url), options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_running()
        await publish_n(conn, "jobs.x", 100)
        await proc.wait_until(lambda s: s.applied == 100, timeout=20)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert ended is not None and ended[0] >= 1
        await publish_n(conn, "jobs.x", 100, start=100)
        await proc.wait_until(lambda s: s.applied == 200, timeout=20)
        assert not task.done()
    finally:
        proc.request_stop()
        await asyncio.gather(task, return_exceptions=True)
    with psycopg.connect(postgres_url) as check:
        count, distinct = check.execute(
            "SELECT count(*), count(DISTINCT id) FROM effects"
        ).fetchone()
    assert (count, distinct) == (200, 200)
