"""One ack per batch (``ack_policy="all"``) against a real server: nothing acked early, lost
or applied twice.

With ack policy ``all`` the server acks every message up to the sequence acked, whoever
it was delivered to (nats-server consumer.go ``processAckMsg``). A spy subscription on
the consumer's ``$JS.ACK`` subjects sees every acknowledgement the Processor sends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import publish_n
from oncestream import ConfigError, Connection, Processor, ProcessorOptions, SQLiteLedger
from tests._support import effects
from tests.handlers import record


def _opts(**kw: Any) -> ProcessorOptions:
    base: dict[str, Any] = {
        "batch": 100,
        "ack_wait": 5,
        "expires": 5,
        "prune_interval": 0,
        "ack_policy": "all",
    }
    base.update(kw)
    return ProcessorOptions(**base)


async def _spy(conn: Connection, stream: str, consumer: str) -> list[bytes]:
    """Every payload sent to the consumer's ack subjects (+ACK, -NAK, +WPI, +TERM)."""
    seen: list[bytes] = []

    async def note(msg: Any) -> None:
        seen.append(msg.data)

    await conn.nc.subscribe(f"$JS.ACK.{stream}.{consumer}.>", cb=note)
    await conn.nc.flush()
    return seen


async def _caught_up(conn: Connection, stream: str, consumer: str, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while True:
            info = await conn.consumer_info(stream, consumer)
            if info["num_pending"] == 0 and info["num_ack_pending"] == 0:
                return
            await asyncio.sleep(0.05)


async def _run(proc: Processor, until: Callable[[], Any]) -> None:
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_running()
        await until()
    finally:
        await proc.stop()
        await task


async def test_a_batch_is_acknowledged_with_one_confirmed_ack(
    conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 2000)
    acks = await _spy(conn, "JOBS", "w")
    db = tmp_path / "l.db"
    proc = Processor(conn, "JOBS", "w", record, ledger=SQLiteLedger(db), options=_opts())
    await _run(proc, lambda: _caught_up(conn, "JOBS", "w"))
    assert effects(db) == (2000, 2000)
    info = await conn.consumer_info("JOBS", "w")
    assert info["config"]["ack_policy"] == "all"
    assert info["ack_floor"]["stream_seq"] == 2000
    sent = acks.count(b"+ACK")
    # One confirmed ack per batch (20 of 100 messages at least), not one per message.
    assert 0 < sent <= proc.stats.batches <= 2000 // 100 * 2
    assert proc.stats.double_acks == sent


@pytest.mark.parametrize("dead_letters", [False, True], ids=["retried", "dead_lettered"])
async def test_a_failing_message_in_a_batch_is_neither_acked_early_nor_lost(
    conn: Connection, make_stream: Any, tmp_path: Path, dead_letters: bool
) -> None:
    """Seq 50 fails twice (then succeeds, or is dead-lettered after two attempts); no ack
    may cover it before that, and every other message is applied once."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", 300)
    acks = await _spy(conn, "JOBS", "w")
    failures = {49: 0}
    finished = asyncio.Event()

    def flaky(msg: Any, tx: Any) -> None:
        n = int(msg.data)  # seq n + 1
        if n in failures and (dead_letters or failures[n] < 2):
            failures[n] += 1
            raise RuntimeError("downstream refused it")
        record(msg, tx)
        if n in failures:
            finished.set()

    opts = _opts(backoff=(0.3,), max_deliver=2, dead_letter_stream="DLQ" if dead_letters else None)
    db = tmp_path / "l.db"
    proc = Processor(conn, "JOBS", "w", flaky, ledger=SQLiteLedger(db), options=opts)
    floors: list[tuple[int, bool]] = []

    async def watch() -> None:
        # The server's ack floor while seq 50 is unfinished: it must stay below 50.
        while True:
            info = await conn.consumer_info("JOBS", "w")
            done = finished.is_set() or proc.stats.dead_lettered > 0
            floors.append((int(info["ack_floor"]["stream_seq"]), done))
            await asyncio.sleep(0.02)

    async def until() -> None:
        watcher = asyncio.create_task(watch())
        try:
            await _caught_up(conn, "JOBS", "w")
        finally:
            watcher.cancel()

    await _run(proc, until)
    early = [floor for floor, done in floors if floor >= 50 and not done]
    assert not early, f"the ack floor passed seq 50 while it was unfinished: {early[:5]}"
    assert any(floor < 50 for floor, _ in floors)  # the watch saw the failing phase
    count, distinct = effects(db)
    if dead_letters:
        assert (count, distinct) == (299, 299)
        assert proc.stats.dead_lettered == 1
        assert (await conn.stream_info("DLQ"))["state"]["messages"] == 1
    else:
        assert (count, distinct) == (300, 300)
        assert proc.stats.dead_lettered == 0
    # A +TERM would ack every message below the dead letter too: never sent.
    assert b"+TERM" not in acks
    assert (await conn.consumer_info("JOBS", "w"))["ack_floor"]["stream_seq"] == 300


async def test_deliveries_to_another_client_are_a_gap_and_not_acked_over(
    conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    """A client that takes messages of the consumer and never acks them (it crashed):
    the Processor must not ack past them; it resets the consumer and applies them."""
    total = 400
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", total)
    db = tmp_path / "l.db"

    def slow(msg: Any, tx: Any) -> None:
        record(msg, tx)
        time.sleep(0.002)

    proc = Processor(conn, "JOBS", "w", slow, ledger=SQLiteLedger(db), options=_opts(batch=10))
    taken: list[int] = []

    async def until() -> None:
        await proc.wait_until(lambda s: s.applied >= 20)
        js = conn.nc.jetstream()
        other = await js.pull_subscribe_bind("w", stream="JOBS")
        async with asyncio.timeout(20):
            while not taken:
                try:
                    got = await other.fetch(3, timeout=1)
                except TimeoutError:
                    continue
                taken.extend(m.metadata.sequence.stream for m in got)
        await other.unsubscribe()  # gone without an ack
        await _caught_up(conn, "JOBS", "w")

    await _run(proc, until)
    assert taken
    assert effects(db) == (total, total), f"the deliveries {taken} of the other client"
    assert proc.stats.resets >= 1


async def test_a_second_processor_takes_the_consumer_over_and_the_first_stops(
    conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    """Two Processors on one ack-all consumer: the one started last owns it; the first
    stops at its next batch without acking any of the second one's deliveries, even one
    that keeps failing there."""
    total = 600
    await make_stream("JOBS", ("jobs.>",))
    db = tmp_path / "l.db"
    fails = {300: 0}

    def handler(msg: Any, tx: Any) -> None:
        n = int(msg.data)
        if n in fails and fails[n] < 3:
            fails[n] += 1
            raise RuntimeError("not yet")
        record(msg, tx)
        time.sleep(0.001)

    opts = _opts(batch=20, backoff=(0.5,), max_deliver=10)
    first = Processor(conn, "JOBS", "w", handler, ledger=SQLiteLedger(db), options=opts)
    second = Processor(conn, "JOBS", "w", handler, ledger=SQLiteLedger(db), options=opts)
    first_task = asyncio.create_task(first.run())
    await first.wait_running()
    await publish_n(conn, "jobs.x", total // 2)
    await first.wait_until(lambda s: s.applied >= 50)
    second_task = asyncio.create_task(second.run())
    try:
        await second.wait_running()
        await publish_n(conn, "jobs.x", total // 2, start=total // 2)
        with pytest.raises(ConfigError, match="another Processor started on it"):
            async with asyncio.timeout(30):
                await first_task
        await _caught_up(conn, "JOBS", "w")
    finally:
        first.request_stop()
        await second.stop()
        await asyncio.gather(first_task, second_task, return_exceptions=True)
    assert effects(db) == (total, total)
    assert fails[300] == 3


async def test_the_ack_policy_must_match_an_existing_consumer(
    conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("JOBS", ("jobs.>",))
    for name, policy in (("e", "explicit"), ("a", "all")):
        config = {"durable_name": name, "ack_policy": policy}
        await conn.api(f"CONSUMER.CREATE.JOBS.{name}", {"stream_name": "JOBS", "config": config})
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "e", record, ledger=ledger, options=_opts())
    with pytest.raises(ConfigError, match="has ack_policy 'explicit', not 'all'"):
        async with asyncio.timeout(10):
            await proc.run()
    proc = Processor(conn, "JOBS", "a", record, ledger=ledger, options=_opts(ack_policy="explicit"))
    with pytest.raises(ConfigError, match="--ack-policy all"):
        async with asyncio.timeout(10):
            await proc.run()
