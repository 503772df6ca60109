"""Processor against a real server with the SQLite ledger."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from harness import publish_n
from oncestream import (
    ConfigError,
    Processor,
    ProcessorOptions,
    ProcessorStats,
    SQLiteLedger,
)
from oncestream.ledger import LedgerEntry
from tests._support import effects
from tests.handlers import always_fails, record


async def _run_until(
    processor: Processor, done: Callable[[ProcessorStats], bool], timeout: float = 30
) -> None:
    task = asyncio.create_task(processor.run())
    try:
        await processor.wait_until(done, timeout)
    finally:
        await processor.stop()
        await task


def _opts(**kw: Any) -> ProcessorOptions:
    base: dict[str, Any] = {"batch": 100, "ack_wait": 2, "expires": 5, "prune_interval": 0}
    base.update(kw)
    return ProcessorOptions(**base)


async def test_applies_each_message_once_and_suppresses_recorded(
    conn, make_stream, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 1000)
    ledger = SQLiteLedger(tmp_path / "l.db")
    # As if a previous run committed seq 1..10 and crashed before acking them.
    ledger.open()
    tx = ledger.begin()
    tx.claim([LedgerEntry("JOBS", seq) for seq in range(1, 11)])
    tx.commit()
    proc = Processor(conn, "JOBS", "w", record, ledger=ledger, options=_opts())
    await _run_until(proc, lambda s: s.applied + s.suppressed >= 1000)
    assert (proc.stats.applied, proc.stats.suppressed) == (990, 10)
    assert effects(tmp_path / "l.db") == (990, 990)
    info = await conn.consumer_info("JOBS", "w")
    assert info["num_ack_pending"] == 0 and info["num_pending"] == 0
    assert info["config"]["ack_policy"] == "explicit"
    assert proc.stats.double_acks == proc.stats.batches > 0


async def test_one_failure_in_a_batch_loses_and_doubles_nothing(
    conn, make_stream, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 300)
    attempts: dict[int, int] = {}

    def flaky(msg, tx) -> None:  # type: ignore[no-untyped-def]
        n = int(msg.data)
        attempts[n] = attempts.get(n, 0) + 1
        record(msg, tx)
        # Fails in the batch transaction and again in its own one: nak, then success.
        if n == 150 and attempts[n] <= 2:
            raise RuntimeError("transient")

    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", flaky, ledger=ledger, options=_opts(backoff=(0.1,)))
    await _run_until(proc, lambda s: s.applied >= 300)
    assert effects(tmp_path / "l.db") == (300, 300)
    assert proc.stats.failed == 1 and attempts[150] == 3
    assert all(attempts[n] <= 2 for n in range(300) if n != 150)


async def test_async_handler_and_in_progress_acks(conn, options, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 3)

    async def slow(msg, tx) -> None:  # type: ignore[no-untyped-def]
        if int(msg.data) == 1:
            await asyncio.sleep(2.5)  # longer than ack_wait (1s): +WPI keeps it ours
        record(msg, tx)

    # ConnectOptions instead of a Connection: the Processor connects and closes itself.
    proc = Processor(
        options,
        "JOBS",
        "w",
        slow,
        ledger=SQLiteLedger(tmp_path / "l.db"),
        options=_opts(ack_wait=1),
    )
    await _run_until(proc, lambda s: s.applied >= 3)
    info = await conn.consumer_info("JOBS", "w")
    assert info["num_redelivered"] == 0
    assert effects(tmp_path / "l.db") == (3, 3)


async def test_in_progress_acks_cover_buffered_messages(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The pull window is two batches: what waits behind a slow batch must not expire."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 6)

    async def slow(msg, tx) -> None:  # type: ignore[no-untyped-def]
        if msg.seq == 1:
            await asyncio.sleep(2.5)  # the workload: longer than ack_wait (1s)
        record(msg, tx)

    proc = Processor(
        conn, "JOBS", "w", slow, ledger=SQLiteLedger(tmp_path / "l.db"),
        options=_opts(batch=2, ack_wait=1),
    )  # fmt: skip
    await _run_until(proc, lambda s: s.applied >= 6)
    # Delivered at once (the window asks for 4) and buffered for 2.5 s: without their
    # own in-progress acks the server redelivers them after 1 s, and the ledger
    # suppresses the redeliveries (all acked by now, so CONSUMER.INFO no longer shows it).
    assert (proc.stats.suppressed, proc.stats.late_acks) == (0, 0)
    assert effects(tmp_path / "l.db") == (6, 6)


async def test_always_failing_message_is_dead_lettered(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    js = conn.nc.jetstream()
    await js.publish("jobs.x", b"42", headers={"Trace": "t-1", "Nats-Msg-Id": "orig-1"})
    options = _opts(max_deliver=3, backoff=(0.05,), dead_letter_stream="DLQ")
    proc = Processor(
        conn, "JOBS", "w", always_fails, ledger=SQLiteLedger(tmp_path / "l.db"), options=options
    )
    await _run_until(proc, lambda s: s.dead_lettered >= 1)
    assert proc.stats.failed == 3 and proc.stats.applied == 0
    dead = await js.get_msg("DLQ", seq=1)
    assert dead.data == b"42" and dead.subject == "DLQ.JOBS"
    headers = dead.headers or {}
    assert headers["Oncestream-Error"] == "RuntimeError: cannot handle b'42'"
    assert headers["Oncestream-Attempts"] == "3"
    assert (headers["Oncestream-Stream"], headers["Oncestream-Sequence"]) == ("JOBS", "1")
    assert headers["Trace"] == "t-1" and headers["Oncestream-Msg-Id"] == "orig-1"
    # The consumer's own letter of seq 1 of this stream (its creation time, digits only).
    created = "".join(c for c in (await conn.stream_info("JOBS"))["created"] if c.isdigit())
    assert headers["Nats-Msg-Id"] == f"dlq:JOBS:w:1:{created}"
    info = await conn.consumer_info("JOBS", "w")
    assert info["num_ack_pending"] == 0 and info["num_pending"] == 0  # terminated, not dropped


async def test_server_restart_during_processing(nats_server, conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 3000)

    def slow_record(msg, tx) -> None:  # type: ignore[no-untyped-def]
        record(msg, tx)
        if int(msg.data) % 100 == 0:
            import time

            time.sleep(0.02)

    proc = Processor(
        conn,
        "JOBS",
        "w",
        slow_record,
        ledger=SQLiteLedger(tmp_path / "l.db"),
        options=_opts(batch=50),
    )
    task = asyncio.create_task(proc.run())
    try:
        async with asyncio.timeout(60):
            await proc.wait_until(lambda s: s.applied >= 500)
            assert proc.stats.applied < 3000
            nats_server.restart()
            while True:
                if proc.stats.applied >= 3000:
                    info = await conn.consumer_info("JOBS", "w")
                    if info["num_ack_pending"] == 0 and info["num_pending"] == 0:
                        break
                await asyncio.sleep(0.1)
    finally:
        await proc.stop()
        await task
    assert conn.reconnects >= 1
    assert effects(tmp_path / "l.db") == (3000, 3000)


async def test_existing_consumer_is_validated(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await conn.api(
        "CONSUMER.CREATE.JOBS.none",
        {"stream_name": "JOBS", "config": {"durable_name": "none", "ack_policy": "none"}},
    )
    proc = Processor(conn, "JOBS", "none", record, ledger=SQLiteLedger(tmp_path / "l.db"))
    with pytest.raises(ConfigError, match="ack_policy 'none'"):
        await proc.run()
    await conn.api(
        "CONSUMER.CREATE.JOBS.md",
        {
            "stream_name": "JOBS",
            "config": {"durable_name": "md", "ack_policy": "explicit", "max_deliver": 2},
        },
    )
    opts = _opts(max_deliver=3, dead_letter_stream="DLQ")
    proc = Processor(
        conn, "JOBS", "md", record, ledger=SQLiteLedger(tmp_path / "l.db"), options=opts
    )
    with pytest.raises(ConfigError, match="max_deliver 2"):
        await proc.run()


async def test_bind_makes_no_api_calls(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await conn.api(
        "CONSUMER.CREATE.JOBS.b",
        {"stream_name": "JOBS", "config": {"durable_name": "b", "ack_policy": "explicit"}},
    )
    await publish_n(conn, "jobs.x", 20)
    calls: list[str] = []
    real_api = conn.api

    async def spy(subject: str, *args: Any, **kw: Any) -> dict[str, Any]:
        calls.append(subject)
        return await real_api(subject, *args, **kw)

    conn.api = spy  # type: ignore[method-assign]
    try:
        proc = Processor(
            conn,
            "JOBS",
            "b",
            record,
            ledger=SQLiteLedger(tmp_path / "l.db"),
            options=_opts(bind=True),
        )
        await _run_until(proc, lambda s: s.applied >= 20)
    finally:
        conn.api = real_api  # type: ignore[method-assign]
    assert calls == []
    assert effects(tmp_path / "l.db") == (20, 20)


async def test_msg_id_key_suppresses_republish_outside_window(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",), duplicate_window=0.2)
    js = conn.nc.jetstream()
    first = await js.publish("jobs.x", b"1", headers={"Nats-Msg-Id": "order-1"})
    await asyncio.sleep(0.4)  # let the server's duplicate window pass: nothing to await
    second = await js.publish("jobs.x", b"1", headers={"Nats-Msg-Id": "order-1"})
    assert (first.seq, second.seq, second.duplicate) == (1, 2, None)  # the server stored both
    ledger = SQLiteLedger(tmp_path / "l.db", key="msg_id")
    proc = Processor(conn, "JOBS", "w", record, ledger=ledger, options=_opts())
    await _run_until(proc, lambda s: s.applied + s.suppressed >= 2)
    assert (proc.stats.applied, proc.stats.suppressed) == (1, 1)
    assert effects(tmp_path / "l.db") == (1, 1)


async def test_ledger_is_pruned_below_the_ack_floor(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 200)
    ledger = SQLiteLedger(tmp_path / "l.db")
    options = _opts(prune_interval=0.2, prune_grace=0.3, prune_limit=150)
    proc = Processor(conn, "JOBS", "w", record, ledger=ledger, options=options)
    await _run_until(proc, lambda s: s.applied >= 200 and s.pruned >= 200, timeout=20)
    with SQLiteLedger(tmp_path / "l.db") as check:
        assert check.applied_count("JOBS") == 0
    assert effects(tmp_path / "l.db") == (200, 200)  # effects stay, ledger rows go
