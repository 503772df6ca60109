"""Processors in a priority group against a real server: pinned (active/standby) and overflow.

The takeover after SIGKILL/SIGSTOP of a worker process is tests/chaos/test_standby_takeover.py;
here: the options, one active instance at a time, the owner check that keeps a
superseded instance from applying, overflow workers, and the late-ack counter.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import ServerVersion
from prometheus_client import CollectorRegistry

from harness import publish_n
from oncestream import (
    ConfigError,
    Connection,
    OperationTimeout,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from oncestream.ledger import LedgerEntry
from oncestream.metrics import instrument
from oncestream.process._acking import Acknowledger
from oncestream.process._pinning import OwnerCheck, Superseded, fence_name, require_reset
from tests._support import effects
from tests.handlers import record


def _opts(**kw: Any) -> ProcessorOptions:
    base: dict[str, Any] = {"batch": 50, "ack_wait": 30, "prune_interval": 0}
    base.update(kw)
    return ProcessorOptions(**base)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"priority_group": "no spaces"}, "priority_group must be 1-16 characters"),
        ({"priority_group": "x" * 17}, "priority_group must be 1-16 characters"),
        ({"priority_group": "g", "policy": "sticky"}, "policy must be 'pinned' or 'overflow'"),
        ({"priority_group": "g", "pinned_ttl": 1}, "pinned_ttl must be at least 2s"),
        ({"priority_group": "g", "policy": "overflow"}, "needs min_pending or min_ack_pending"),
        ({"priority_group": "g", "min_pending": 5}, "apply to policy 'overflow'"),
        ({"min_pending": 5}, "need priority_group"),
        ({"priority_group": "g", "bind": True}, "cannot be combined with bind=True"),
    ],
)
def test_bad_priority_options_are_named(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _opts(**kw)


def test_pinned_pulls_well_within_the_pin_ttl() -> None:
    pull = _opts(priority_group="g", pinned_ttl=6, expires=30).pull_options()
    assert (pull.group, pull.pinned, pull.expires, pull.pin_refresh) == ("g", True, 3.0, 2.0)


def test_servers_without_the_reset_api_are_refused() -> None:
    class Old:
        class nc:
            connected_server_version = ServerVersion("2.13.4")

    with pytest.raises(
        ConfigError, match=r"needs nats-server 2.14 or newer; this server is 2.13.4"
    ):
        require_reset(Old(), "a pinned priority group")  # type: ignore[arg-type]


async def _start(proc: Processor) -> asyncio.Task[Any]:
    task = asyncio.create_task(proc.run())
    await proc.wait_running()
    return task


async def test_one_active_instance_applies_and_a_standby_takes_over_when_it_stops(
    conn: Connection, options, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    opts = _opts(priority_group="g", pinned_ttl=2)
    a = Processor(conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
    task_a = await _start(a)
    await publish_n(conn, "jobs.x", 100)
    await a.wait_until(lambda s: s.applied == 100)
    async with await connect(options) as conn_b:
        b = Processor(conn_b, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
        task_b = await _start(b)
        await publish_n(conn, "jobs.x", 100, start=100)
        await a.wait_until(lambda s: s.applied == 200)
        assert (b.stats.applied, b.stats.takeovers, b.active_pin) == (0, 0, None)
        info = await conn.consumer_info("JOBS", "w")
        assert info["config"]["priority_policy"] == "pinned_client"
        assert [g["pinned_client_id"] for g in info["priority_groups"]] == [a.active_pin]
        await a.stop()
        await task_a
        await publish_n(conn, "jobs.x", 100, start=200)
        await b.wait_until(lambda s: s.applied == 100, timeout=20)
        assert b.stats.takeovers == 1 and b.active_pin is not None
        await b.stop()
        await task_b
    assert effects(db) == (300, 300)


async def test_a_superseded_instance_rolls_its_batch_back(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The owner check: the old active one's next batch is not applied, the new one's is."""
    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    a = Processor(
        conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=_opts(priority_group="g")
    )
    task = await _start(a)
    await publish_n(conn, "jobs.x", 10)
    await a.wait_until(lambda s: s.applied == 10)
    old_pin = a.active_pin
    assert old_pin is not None
    # Another instance takes over (the first step of its takeover: the ledger's owner row).
    from oncestream.process._pinning import take_over

    name = fence_name("JOBS", "w", "g")
    assert take_over(SQLiteLedger(db).__enter__(), name, "pin-of-b") == old_pin
    await publish_n(conn, "jobs.x", 5, start=10)
    await a.wait_until(lambda s: s.demotions == 1, timeout=10)
    assert a.stats.applied == 10 and a.active_pin is None
    await a.stop()
    await task
    assert effects(db) == (10, 10)
    ledger = SQLiteLedger(db)
    with ledger:
        tx = ledger.begin()
        with pytest.raises(Superseded, match="another instance took over"):
            OwnerCheck(ledger, name, old_pin)(tx)
        OwnerCheck(ledger, name, "pin-of-b")(tx)  # the owner passes
        tx.rollback()
        assert not ledger.is_applied(LedgerEntry("JOBS", 11))


async def test_overflow_instance_pulls_only_while_the_consumer_is_behind(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    opts = _opts(priority_group="spill", policy="overflow", min_pending=500, batch=100)
    proc = Processor(
        conn, "JOBS", "w", record, ledger=SQLiteLedger(tmp_path / "l.db"), options=opts
    )
    task = await _start(proc)
    await publish_n(conn, "jobs.x", 50)
    info = await conn.consumer_info("JOBS", "w")
    deadline = time.monotonic() + 10
    while not info["num_waiting"] and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # until the server holds the request: no event says so
        info = await conn.consumer_info("JOBS", "w")
    assert info["config"]["priority_policy"] == "overflow"
    assert (info["num_waiting"], info["num_pending"], proc.stats.applied) == (1, 50, 0)
    await publish_n(conn, "jobs.x", 950, start=50)
    await proc.wait_until(lambda s: s.applied >= 500, timeout=20)
    await proc.stop()
    await task
    remaining = (await conn.consumer_info("JOBS", "w"))["num_pending"]
    assert remaining < 500 + 100  # it stopped being fed once the backlog fell below min_pending


async def test_an_existing_consumer_with_another_policy_is_refused(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("JOBS", ("jobs.>",))
    ledger = SQLiteLedger(tmp_path / "l.db")
    plain = Processor(conn, "JOBS", "w", record, ledger=ledger, options=_opts())
    task = await _start(plain)
    await plain.stop()
    await task
    pinned = Processor(conn, "JOBS", "w", record, ledger=ledger, options=_opts(priority_group="g"))
    with pytest.raises(ConfigError, match=r"priority policy 'none' .* cannot be changed"):
        await pinned.run()


class _AcksLost(Acknowledger):
    async def ack(self, replies: list[str]) -> None:  # the acks are lost on the way
        return None


class _AcksLostProcessor(Processor):
    _acknowledger_type = _AcksLost


async def test_redeliveries_of_applied_messages_count_as_late_acks(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """An ack that never reached the server: the redelivery is suppressed and counted."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 20)
    db = tmp_path / "l.db"
    first = _AcksLostProcessor(
        conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=_opts(ack_wait=1)
    )
    task = await _start(first)
    await first.wait_until(lambda s: s.applied == 20)
    await first.wait_until(lambda s: s.suppressed == 20, timeout=10)  # redelivered after 1s
    await first.stop()
    await task
    assert first.stats.late_acks == 20
    registry = CollectorRegistry()
    exported = instrument(first, registry)
    assert (
        registry.get_sample_value(
            "oncestream_processor_late_acks_total", {"stream": "JOBS", "consumer": "w"}
        )
        == 20
    )
    exported.close()
    assert effects(db) == (20, 20)
    with SQLiteLedger(db) as ledger:
        assert ledger.applied_count() == 20


def test_the_owner_check_holds_its_row_until_the_batch_ends_on_postgres(
    postgres_url: str,
) -> None:
    """PostgreSQL: a takeover waits for a batch that passed the owner check (FOR SHARE)."""
    import threading

    from oncestream import PostgresLedger
    from oncestream.process._pinning import take_over

    name = fence_name("JOBS", "w", "g")
    old, new = PostgresLedger(postgres_url), PostgresLedger(postgres_url)
    with old, new:
        assert take_over(old, name, "pin-a") is None
        tx = old.begin()
        OwnerCheck(old, name, "pin-a")(tx)  # the old owner's batch is under way
        done = threading.Event()
        thread = threading.Thread(target=lambda: (take_over(new, name, "pin-b"), done.set()))
        thread.start()
        assert not done.wait(0.5), "the takeover did not wait for the batch in flight"
        tx.commit()
        assert done.wait(10)
        thread.join()
        tx = old.begin()
        with pytest.raises(Superseded):
            OwnerCheck(old, name, "pin-a")(tx)
        tx.rollback()


async def test_a_takeover_whose_consumer_reset_fails_keeps_the_pin_and_retries(
    conn: Connection, options, make_stream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The reset request of a takeover fails once (a timeout, injected): it is retried.

    Before, the takeover was abandoned: everything the server had delivered under the
    new pin stayed unacknowledged for the ack wait (30 s here), and with nothing else
    pending no new pin was handed out before that: nothing was applied for 30 s.
    """
    from oncestream.process import _pinning

    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    opts = _opts(priority_group="g", pinned_ttl=2)
    a = Processor(conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
    task_a = await _start(a)
    await publish_n(conn, "jobs.x", 10)
    await a.wait_until(lambda s: s.applied == 10)
    real = _pinning.reset_to_ack_floor
    failed: list[str] = []

    async def fails_once(conn: Connection, stream: str, consumer: str) -> int:
        if not failed:
            failed.append(consumer)
            raise OperationTimeout("injected: the consumer reset was not answered")
        return await real(conn, stream, consumer)

    monkeypatch.setattr(_pinning, "reset_to_ack_floor", fails_once)
    async with await connect(options) as conn_b:
        b = Processor(conn_b, "JOBS", "w", record, ledger=SQLiteLedger(db), options=opts)
        task_b = await _start(b)
        await a.stop()
        await task_a
        await publish_n(conn, "jobs.x", 10, start=10)
        await b.wait_until(lambda s: s.applied == 10, timeout=15)  # well within the ack wait
        assert (failed, b.stats.takeovers) == (["w"], 1)
        await b.stop()
        await task_b
    assert effects(db) == (20, 20)


def test_a_fence_gives_up_after_its_wait_while_a_batch_holds_the_sqlite_lock(
    tmp_path: Path,
) -> None:
    """A bounded fence attempt: FenceBusy after ``wait``, not the busy timeout (30 s)."""
    import time

    from oncestream.process._pinning import FenceBusy, take_over

    name = fence_name("JOBS", "w", "g")
    old, new = SQLiteLedger(tmp_path / "l.db"), SQLiteLedger(tmp_path / "l.db")
    with old, new:
        assert take_over(old, name, "pin-a") is None
        tx = old.begin()
        OwnerCheck(old, name, "pin-a")(tx)  # the old owner's batch is under way
        began = time.monotonic()
        with pytest.raises(FenceBusy, match="is locked by another process"):
            take_over(new, name, "pin-b", wait=0.2)
        assert time.monotonic() - began < 10
        assert new.connection.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        tx.commit()
        assert take_over(new, name, "pin-b", wait=0.2) == "pin-a"


def test_a_fence_gives_up_after_its_wait_while_a_batch_holds_the_row_on_postgres(
    postgres_url: str,
) -> None:
    """PostgreSQL: the fence's ``lock_timeout``; FenceBusy, then the takeover once it ends."""
    from oncestream import PostgresLedger
    from oncestream.process._pinning import FenceBusy, take_over

    name = fence_name("JOBS", "w", "g")
    old, new = PostgresLedger(postgres_url), PostgresLedger(postgres_url)
    with old, new:
        assert take_over(old, name, "pin-a") is None
        tx = old.begin()
        OwnerCheck(old, name, "pin-a")(tx)
        with pytest.raises(FenceBusy, match="is locked by another process"):
            take_over(new, name, "pin-b", wait=0.2)
        tx.commit()
        assert take_over(new, name, "pin-b", wait=0.2) == "pin-a"
        tx = old.begin()
        with pytest.raises(Superseded):
            OwnerCheck(old, name, "pin-a")(tx)
        tx.rollback()


async def test_a_standby_starting_while_the_ledger_is_locked_waits_for_it(
    conn: Connection, make_stream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """Opening the ledger waits for another process's write lock; before, it raised
    LedgerError after one busy timeout and the standby was gone."""
    import logging
    import sqlite3

    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    with SQLiteLedger(db):
        pass
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # e.g. an active instance frozen inside a batch
    opts = _opts(priority_group="g", pinned_ttl=2)
    ledger = SQLiteLedger(db, busy_timeout=0.2)
    proc = Processor(conn, "JOBS", "w", record, ledger=ledger, options=opts)
    caplog.set_level(logging.WARNING, "oncestream.process")
    task = asyncio.create_task(proc.run())
    try:
        # Several busy timeouts pass and it is still there, waiting.
        done, _ = await asyncio.wait({task}, timeout=1.5)
        assert not done, task.result()
        assert "cannot open the ledger yet, another process holds its lock" in caplog.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await proc.wait_running()
    await publish_n(conn, "jobs.x", 5)
    await proc.wait_until(lambda s: s.applied == 5, timeout=20)
    await proc.stop()
    await task
    assert effects(db) == (5, 5)


def test_postgres_ends_a_frozen_owners_transaction_and_the_takeover_goes_through(
    postgres_url: str,
) -> None:
    """``idle_in_transaction_session_timeout``: the frozen owner's batch is ended by the
    server, the fence goes through, and the old owner's commit is refused."""
    from oncestream import LedgerError, PostgresLedger
    from oncestream.process._pinning import FenceBusy, take_over

    name = fence_name("JOBS", "w", "g")
    old, new = PostgresLedger(postgres_url), PostgresLedger(postgres_url)
    with old, new:
        assert take_over(old, name, "pin-a") is None
        old.connection.execute("SET idle_in_transaction_session_timeout = '300ms'")
        old.connection.commit()
        tx = old.begin()
        OwnerCheck(old, name, "pin-a")(tx)  # and then frozen: no further statement
        busy = 0
        for _ in range(100):  # each attempt waits 0.2 s at most
            try:
                previous = take_over(new, name, "pin-b", wait=0.2)
                break
            except FenceBusy:
                busy += 1
        else:
            pytest.fail("the fence never went through")
        assert previous == "pin-a" and busy >= 1
        with pytest.raises(LedgerError):
            tx.commit()


async def test_only_the_active_instance_prunes(
    conn: Connection, options, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: a standby does not prune (it knows nothing of the messages the
    active instance handed back: finding 31); once it takes over, it does."""
    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    a = Processor(
        conn, "JOBS", "w", record, ledger=SQLiteLedger(db),
        options=_opts(priority_group="g", pinned_ttl=2),
    )  # fmt: skip
    task_a = await _start(a)
    await publish_n(conn, "jobs.x", 100)
    await a.wait_until(lambda s: s.applied == 100)
    pruning = _opts(priority_group="g", pinned_ttl=2, prune_interval=0.1, prune_grace=0.1)
    async with await connect(options) as conn_b:
        b = Processor(conn_b, "JOBS", "w", record, ledger=SQLiteLedger(db), options=pruning)
        task_b = await _start(b)
        # 10+ prune rounds of the standby: none prunes (a round that did would wake this).
        with pytest.raises(OperationTimeout):
            await b.wait_until(lambda s: s.pruned > 0, timeout=1.5)
        assert b.active_pin is None
        await a.stop()
        await task_a
        await publish_n(conn, "jobs.x", 100, start=100)  # a pin is given with messages
        await b.wait_until(lambda s: s.takeovers == 1 and s.pruned >= 100, timeout=20)
        await b.stop()
        await task_b
    assert effects(db) == (200, 200)
