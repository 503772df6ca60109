"""Processors on a PostgreSQL ledger: three sharing one durable consumer apply each message
once; sessions ended under them (a PostgreSQL restart or kill) are ridden out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from harness import publish_n
from oncestream import ConnectOptions, PostgresLedger, Processor, ProcessorOptions, connect
from tests.handlers import record
from tests.integration._registry_support import edit_filter
from tests.integration.test_processor_max_deliver import _dead_letters

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


def _end_sessions(url: str, admin_url: str | None = None) -> int:
    """Terminate every session of the database of ``url`` (connected to ``admin_url``, else
    to it), as a PostgreSQL restart or kill ends them; waits until each has ended.
    Returns how many."""
    with psycopg.connect(admin_url or url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))"
            " FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (url.rsplit("/", 1)[1],),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _allow_connections(server_url: str, url: str, allowed: bool) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}')


async def _started(proc: Processor) -> asyncio.Task[Any]:
    """``proc.run()`` once it pulls; its error when it ended during its set-up."""
    task = asyncio.create_task(proc.run())
    running = asyncio.create_task(proc.wait_running(20))
    await asyncio.wait({task, running}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        running.cancel()
        await task  # raises what ended it
        raise AssertionError("the Processor ended during its set-up")
    await running
    return task


def _effects(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as check:
        row = check.execute("SELECT count(*), count(DISTINCT id) FROM effects").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_a_pinned_standby_rides_out_its_ledger_sessions_end(  # type: ignore[no-untyped-def]
    conn, options: ConnectOptions, make_stream, postgres_url: str
) -> None:
    """The standby's ledger session ends after the ledger was opened and before the
    Processor starts (PostgreSQL killed or restarted then), and again while it waits: it
    starts, waits, takes over when the active one stops and applies the rest, each
    message once. Before, the first read of its start (the registry) ended it with the
    driver's raw error: the rollback after the read failed on the lost connection too.
    """
    await make_stream("JOBS", ("jobs.>",))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
    opts = ProcessorOptions(
        batch=50, ack_wait=30, prune_interval=0, priority_group="g", pinned_ttl=2
    )
    a = Processor(conn, "JOBS", "w", record, ledger=PostgresLedger(postgres_url), options=opts)
    tasks = [await _started(a)]
    async with await connect(options) as conn_b:
        ledger = PostgresLedger(postgres_url)
        ledger.open()  # as a service opens it (its own tables) before it starts processing
        b = Processor(conn_b, "JOBS", "w", record, ledger=ledger, options=opts)
        try:
            await publish_n(conn, "jobs.x", 100)
            await a.wait_until(lambda s: s.applied == 100, timeout=20)
            assert _end_sessions(postgres_url) == 2  # a's and b's
            tasks.append(await _started(b))
            await publish_n(conn, "jobs.x", 100, start=100)
            await a.wait_until(lambda s: s.applied == 200, timeout=20)
            assert (b.stats.applied, b.active_pin) == (0, None)
            assert _end_sessions(postgres_url) == 2  # while b waits as the standby
            await a.stop()
            await publish_n(conn, "jobs.x", 100, start=200)
            await b.wait_until(lambda s: s.applied == 100, timeout=30)
            assert b.stats.takeovers == 1 and not tasks[1].done()
        finally:
            a.request_stop()
            b.request_stop()
            results = await asyncio.gather(*tasks, return_exceptions=True)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert _effects(postgres_url) == (300, 300)


async def test_a_filter_edit_while_the_ledger_is_unreachable_is_ridden_out(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_server, postgres_url: str
) -> None:
    """A message outside the registered filters (its consumer's filter was edited) while
    the database cannot be reached: registering the new filters fails, the batch is
    handed back (neither applied nor acked) and applied once the database is back.
    Before, the registry's failure ended the Processor (the driver's raw error)."""
    await make_stream("PR", ("pr.>",))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
    opts = ProcessorOptions(batch=20, ack_wait=30, prune_interval=0, filter_subject="pr.eu")
    proc = Processor(conn, "PR", "w", record, ledger=PostgresLedger(postgres_url), options=opts)
    task = await _started(proc)
    try:
        await publish_n(conn, "pr.eu", 10)
        await proc.wait_until(lambda s: s.applied == 10, timeout=20)
        _allow_connections(postgres_server.url, postgres_url, False)
        try:
            assert _end_sessions(postgres_url, postgres_server.url) == 1
            await edit_filter(conn, "w", "pr.>")
            await publish_n(conn, "pr.us", 10, start=10)
            await proc.wait_until(lambda s: s.ledger_errors >= 1, timeout=20)
        finally:
            _allow_connections(postgres_server.url, postgres_url, True)
        await proc.wait_until(lambda s: s.applied == 20, timeout=30)
        assert not task.done()
    finally:
        proc.request_stop()
        await task
    assert _effects(postgres_url) == (20, 20)


#: A dead letter after 2 attempts, retried at once: the failing message's claim comes soon.
_CUT_OPTIONS = ProcessorOptions(
    batch=10, ack_wait=5, expires=1, backoff=(0.05,), max_deliver=2,
    dead_letter_stream="DLQ", prune_interval=0,
)  # fmt: skip


def _cut_at_last_attempt(
    server_url: str, url: str
) -> tuple[PostgresLedger, Callable[[Any, Any], None], list[int]]:
    """A ledger, a handler and the sequences it cut: the handler records every message but
    7, which fails; at 7's last attempt it arms a trigger that ends the session of the
    dead letter's claim of it (as a kill would) and refuses new sessions (the database
    unreachable) until :func:`_heal_cut`."""
    ledger = PostgresLedger(url)
    ledger.open()  # its tables, for the trigger below
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
        admin.execute("CREATE TABLE armed (on_seq BIGINT NOT NULL)")
        admin.execute(
            "CREATE FUNCTION cut() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF EXISTS (SELECT 1 FROM armed WHERE on_seq = NEW.seq) THEN"
            " PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NEW; END $$"
        )
        admin.execute(
            "CREATE TRIGGER cut BEFORE INSERT ON oncestream_applied"
            " FOR EACH ROW EXECUTE FUNCTION cut()"
        )
    cuts: list[int] = []

    def fail_7(msg: Any, tx: Any) -> None:
        if int(msg.data) != 7:
            record(msg, tx)
            return
        if msg.metadata.num_delivered == 2 and not cuts:  # its last attempt: the claim next
            cuts.append(msg.metadata.stream_seq)
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("INSERT INTO armed VALUES (%s)", (msg.metadata.stream_seq,))
            _allow_connections(server_url, url, False)
        raise ValueError("refusing 7")

    return ledger, fail_7, cuts


async def _limited_consumer(conn: Any) -> None:
    """Consumer DLJ/w with its own ``max_deliver`` 3 (the Processor's 2: the last delivery
    spare, after which the server drops the message)."""
    config = {"durable_name": "w", "ack_policy": "explicit", "max_deliver": 3}
    await conn.api("CONSUMER.CREATE.DLJ.w", {"stream_name": "DLJ", "config": config})


async def _until_dropped(proc: Processor, task: asyncio.Task[Any]) -> None:
    """Until the server dropped a message of ``proc``'s (``exhausted``); no event marks a
    drop, so a poll bounded at 20 s, which fails if ``task`` ends first."""
    deadline = time.monotonic() + 20
    while proc.stats.exhausted < 1 and not task.done():
        assert time.monotonic() < deadline, proc.stats
        await asyncio.sleep(0.05)


def _heal_cut(server_url: str, url: str) -> None:
    _allow_connections(server_url, url, True)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DELETE FROM armed")


async def test_a_dead_letter_while_the_ledger_is_unreachable_is_ridden_out(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_server, postgres_url: str
) -> None:
    """The database goes away between a failed message's last attempt and its dead
    letter's ledger claim (the session ended, no new one allowed: PostgreSQL killed at that
    moment, as in trial 70 of the 2026-11-30 campaign): the message is handed back, and
    dead-lettered once the database is back; the Processor keeps running. Before, the
    claim's ``LedgerError`` ended the Processor."""
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",))
    ledger, fail_7, cuts = _cut_at_last_attempt(postgres_server.url, postgres_url)
    proc = Processor(conn, "DLJ", "w", fail_7, ledger=ledger, options=_CUT_OPTIONS)
    task = await _started(proc)
    try:
        try:
            await publish_n(conn, "dlj.x", 20, start=1)
            await proc.wait_until(lambda s: s.ledger_errors >= 1 or task.done(), timeout=20)
            assert not task.done(), task.exception()
            assert proc.stats.dead_lettered == 0 and cuts
        finally:
            _heal_cut(postgres_server.url, postgres_url)
        await proc.wait_until(lambda s: s.dead_lettered == 1 and s.applied == 19, timeout=30)
        assert not task.done()
    finally:
        proc.request_stop()
        await task
    assert await _dead_letters(conn) == [7]
    assert _effects(postgres_url) == (19, 19)


async def test_a_drop_whose_settling_meets_the_unreachable_ledger_is_settled_later(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_server, postgres_url: str
) -> None:
    """The consumer's own ``max_deliver`` (3, the Processor's 2: the last delivery spare)
    and the database away for 3 s from the dead letter's claim on: the claim hands the
    message back, its last delivery fails in the batch, the server drops it, and its
    settling meets the same outage. It is settled once the database answers; the
    Processor keeps running. Before, the settling's ``LedgerError`` ended the run with a
    ``MaxDeliverError`` telling to make room in the dead-letter stream, the consumer moved
    back."""
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await _limited_consumer(conn)
    ledger, fail_7, _ = _cut_at_last_attempt(postgres_server.url, postgres_url)
    proc = Processor(conn, "DLJ", "w", fail_7, ledger=ledger, options=_CUT_OPTIONS)
    task = await _started(proc)
    try:
        try:
            await publish_n(conn, "dlj.x", 20, start=1)
            await _until_dropped(proc, task)
            done, _ = await asyncio.wait({task}, timeout=3)  # the outage goes on
            assert not done, task.exception()
        finally:
            _heal_cut(postgres_server.url, postgres_url)
        await proc.wait_until(lambda s: s.dead_lettered == 1 and s.applied == 19, timeout=30)
        assert not task.done() and proc.stats.exhausted == 1
    finally:
        proc.request_stop()
        await task
    assert await _dead_letters(conn) == [7]
    assert _effects(postgres_url) == (19, 19)
