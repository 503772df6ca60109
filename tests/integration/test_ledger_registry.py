"""Who uses a ledger: one life of a stream, consumers whose filters are disjoint (break38b).

Ledger rows are keyed by stream and sequence, so a ledger serves consumers of a
stream that never take the same message, and one life of the stream. The
Processor registers its consumer in the ledger when it starts and refuses a
stream deleted and created again (D3) and a second consumer that takes some of
the same subjects (D4, a renamed consumer included); a prune goes no further than
the lowest ack floor of the registered consumers and records the span in every
one's horizon (D8). Both ledgers, on a real nats-server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from harness import publish_n
from oncestream import (
    ConfigError,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    ProcessorStats,
    SQLiteLedger,
    StartPosition,
)
from oncestream.ledger import Ledger
from oncestream.process._acking import Acknowledger
from oncestream.streams import ResetTarget, StreamSpec, ensure_stream, reset_consumer
from tests.handlers import record


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_and_effects(request, tmp_path):  # type: ignore[no-untyped-def]
    """``(make_ledger, effects)``: a new ledger object on one database; the effect ids."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"

        def make() -> Ledger:
            return SQLiteLedger(path)
    else:
        url = request.getfixturevalue("postgres_url")

        def make() -> Ledger:
            return PostgresLedger(url)

    def effect_ids() -> list[int]:
        with make() as ledger, ledger.transaction() as tx:
            rows = tx.execute("SELECT id FROM effects ORDER BY id").fetchall()
        return [int(row[0]) for row in rows]

    return make, effect_ids


def _opts(**kw: Any) -> ProcessorOptions:
    """Pruning within a second, as it happens after 2.5 minutes by default."""
    base: dict[str, Any] = {"batch": 20, "ack_wait": 5, "expires": 5}
    base.update(prune_interval=0.2, prune_grace=0.3)
    base.update(kw)
    return ProcessorOptions(**base)


async def _run(
    conn: Any,
    ledger: Ledger,
    until: Callable[[ProcessorStats], bool],
    *,
    consumer: str = "c",
    stream: str = "PR",
    processor: type[Processor] = Processor,
    **options: Any,
) -> ProcessorStats:
    """Run a Processor until ``until(stats)`` and it has caught up; return its stats."""
    proc = processor(conn, stream, consumer, record, ledger=ledger, options=_opts(**options))
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(until, 30)
        if processor is Processor:
            await proc.wait_caught_up(30)
    finally:
        await proc.stop()
    return await task


async def _refused(conn: Any, ledger: Ledger, consumer: str, **options: Any) -> str:
    """Start a Processor that must be refused; the error's text."""
    proc = Processor(conn, "PR", consumer, record, ledger=ledger, options=_opts(**options))
    with pytest.raises(ConfigError) as refused:
        async with asyncio.timeout(30):
            await proc.run()
    assert proc.stats.applied == proc.stats.suppressed == 0
    return str(refused.value)


async def test_a_stream_created_again_is_refused(conn, make_stream, ledger_and_effects) -> None:  # type: ignore[no-untyped-def]
    """D3: the stream deleted and created again numbers other messages from 1; the old
    ledger would skip them as applied. Refused naming the stream and both creation times;
    a new ledger applies every new message."""
    make, effects = ledger_and_effects
    old = await make_stream("PR", ("pr.>",))
    await publish_n(conn, "pr.x", 50, start=1)
    await _run(conn, make(), lambda s: s.applied >= 50 and s.pruned >= 50)
    await conn.api("STREAM.DELETE.PR", {})
    new = await ensure_stream(conn, StreamSpec(name="PR", subjects=("pr.>",)))
    await publish_n(conn, "pr.x", 30, start=1001)
    text = await _refused(conn, make(), "c")
    assert "stream 'PR' was created at" in text, text
    assert str(old["created"]) in text and str(new["created"]) in text, text
    assert "new ledger" in text, text
    assert effects() == list(range(1, 51))  # nothing of the new stream skipped or applied


async def test_two_consumers_taking_the_same_subjects_are_refused(
    conn, make_stream, ledger_and_effects
) -> None:  # type: ignore[no-untyped-def]
    """D4: billing and shipping both take every message of one stream, one ledger: the
    second would apply none of them. Refused naming both and the rule."""
    make, effects = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    await publish_n(conn, "pr.x", 20, start=1)
    await _run(conn, make(), lambda s: s.applied >= 20, consumer="billing", prune_interval=0)
    text = await _refused(conn, make(), "shipping", prune_interval=0)
    assert "PR/shipping" in text and "PR/billing" in text, text
    assert "one ledger per consumer of a stream, unless their filter subjects are disjoint" in text
    # Overlapping filters are refused too: us.* and us.ny take us.ny.
    await _refused(conn, make(), "ny", filter_subject="pr.us.ny", prune_interval=0)
    assert effects() == list(range(1, 21))


async def test_a_renamed_consumer_is_refused_and_can_be_moved(
    conn, make_stream, ledger_and_effects
) -> None:  # type: ignore[no-untyped-def]
    """D4 (a7): billing pruned half its rows, then billing_v2 on the same ledger would apply
    the pruned half again. Refused naming how to move; moved that way, nothing twice."""
    make, effects = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    await publish_n(conn, "pr.x", 100, start=1)
    await _run(conn, make(), lambda s: s.applied >= 100 and s.pruned >= 50, consumer="billing")
    text = await _refused(conn, make(), "billing_v2")
    assert "renamed (billing -> billing_v2)" in text, text
    assert "DELETE FROM oncestream_consumers WHERE stream = 'PR' AND consumer = 'billing'" in text
    # The move it names: the new consumer starts after the old one's ack floor; the old
    # one and its registration are deleted.
    floor = (await conn.consumer_info("PR", "billing"))["ack_floor"]["stream_seq"]
    await conn.api("CONSUMER.DELETE.PR.billing", {})
    with make() as ledger, ledger.transaction() as tx:
        mark = ledger.placeholder
        tx.execute(
            f"DELETE FROM oncestream_consumers WHERE stream = {mark} AND consumer = {mark}",
            ("PR", "billing"),
        )
    await publish_n(conn, "pr.x", 10, start=101)
    await _run(
        conn,
        make(),
        lambda s: s.applied >= 10,
        consumer="billing_v2",
        start=StartPosition(seq=floor + 1),
    )
    assert effects() == list(range(1, 111))


class _AcksLost(Acknowledger):
    """Committed, then the worker dies before its acks: none beyond sequence 20 is sent."""

    async def ack(self, replies: list[str]) -> None:
        from oncestream._message import parse_metadata

        kept = [r for r in replies if parse_metadata(r).stream_seq <= 20]
        if kept:
            await super().ack(kept)


class _CrashingBeforeAcks(Processor):
    _acknowledger_type = _AcksLost


async def test_a_neighbours_unacked_rows_are_not_pruned(
    conn, make_stream, ledger_and_effects
) -> None:  # type: ignore[no-untyped-def]
    """D8 (a8): us (pr.us) applied its messages but acked only up to 20 (a crash between
    commit and ack); eu (pr.eu) runs ahead and prunes the shared ledger: no further than
    us's ack floor. us restarts: nothing applied twice."""
    make, effects = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    for n in range(1, 101):
        await publish_n(conn, "pr.eu" if n % 2 else "pr.us", 1, start=n)
    await _run(
        conn,
        make(),
        lambda s: s.applied >= 50,
        consumer="us",
        filter_subject="pr.us",
        prune_interval=0,
        processor=_CrashingBeforeAcks,
    )
    # 20, or 21: the server moves a filtered consumer's floor over a sequence it does not take.
    floor = (await conn.consumer_info("PR", "us"))["ack_floor"]["stream_seq"]
    assert floor in (20, 21)
    eu = await _run(
        conn,
        make(),
        lambda s: s.applied >= 50 and s.pruned >= floor,
        consumer="eu",
        filter_subject="pr.eu",
    )
    assert eu.pruned == floor  # up to us's floor; never a row us may still need
    us = await _run(
        conn,
        make(),
        lambda s: s.applied + s.suppressed >= 40,
        consumer="us",
        filter_subject="pr.us",
    )
    assert us.applied == 0, us
    assert effects() == list(range(1, 101))


async def test_a_disjoint_neighbour_reset_after_pruning_applies_nothing_again(
    conn, make_stream, ledger_and_effects
) -> None:  # type: ignore[no-untyped-def]
    """D8 (a4): eu's prune deletes us's rows too; it records the span in us's horizon as
    well, so `consumer reset us --to-start` applies none of them again."""
    make, effects = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    for n in range(1, 61):
        await publish_n(conn, "pr.eu" if n % 2 else "pr.us", 1, start=n)
    await _run(
        conn,
        make(),
        lambda s: s.applied >= 30,
        consumer="us",
        filter_subject="pr.us",
        prune_interval=0,
    )
    await _run(
        conn,
        make(),
        lambda s: s.applied >= 30 and s.pruned >= 50,
        consumer="eu",
        filter_subject="pr.eu",
    )
    await reset_consumer(conn, "PR", "us", ResetTarget(start=True))
    us = await _run(
        conn,
        make(),
        lambda s: s.applied + s.suppressed >= 30,
        consumer="us",
        filter_subject="pr.us",
        prune_interval=0,
    )
    assert us.applied == 0, us
    assert effects() == list(range(1, 61))


class _Seen(logging.Handler):
    """Sets ``event`` when a log line containing ``text`` is emitted."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text, self.event, self.lines = text, asyncio.Event(), list[str]()

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if self.text in line:
            self.event.set()


async def test_a_registered_consumer_gone_from_the_server_holds_pruning(
    conn, make_stream, ledger_and_effects
) -> None:  # type: ignore[no-untyped-def]
    """A registered consumer deleted from the server: the ledger is pruned no further than
    its last recorded ack floor, and a log line says so."""
    make, _ = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    for n in range(1, 41):
        await publish_n(conn, "pr.eu" if n % 2 else "pr.us", 1, start=n)
    await _run(
        conn,
        make(),
        lambda s: s.applied >= 20,
        consumer="us",
        filter_subject="pr.us",
        prune_interval=0,
    )  # us's recorded ack floor: its floor at start, 0
    await conn.api("CONSUMER.DELETE.PR.us", {})
    seen = _Seen("consumer us is registered in the ledger but no longer exists")
    logger = logging.getLogger("oncestream.process")
    logger.addHandler(seen)
    try:
        eu = Processor(
            conn, "PR", "eu", record, ledger=make(), options=_opts(filter_subject="pr.eu")
        )
        task = asyncio.create_task(eu.run())
        try:
            await eu.wait_until(lambda s: s.applied >= 20, 30)
            async with asyncio.timeout(30):
                await seen.event.wait()
        finally:
            await eu.stop()
        await task
    finally:
        logger.removeHandler(seen)
    assert any("pruned no further than its last recorded ack floor, 0" in x for x in seen.lines)
    assert eu.stats.pruned == 0


async def test_an_idle_disjoint_neighbour_does_not_hold_pruning(
    conn, make_stream, ledger_and_effects
) -> None:  # type: ignore[no-untyped-def]
    """F6 (breaker w5 b9): us (pr.us) is registered but no message ever matched its
    filter, so its ack floor stays 0; with nothing pending and nothing awaiting its
    ack it has acked all it takes up to the stream's last sequence, and eu (pr.eu)
    prunes past it. Then us takes new messages: each applied once."""
    make, effects = ledger_and_effects
    await make_stream("PR", ("pr.>",))
    await _run(
        conn, make(), lambda s: True, consumer="us", filter_subject="pr.us", prune_interval=0
    )
    await publish_n(conn, "pr.eu", 20, start=1)
    eu = await _run(
        conn,
        make(),
        lambda s: s.applied >= 20 and s.pruned >= 20,
        consumer="eu",
        filter_subject="pr.eu",
    )
    assert eu.pruned == 20
    assert (await conn.consumer_info("PR", "us"))["ack_floor"]["stream_seq"] == 0
    await publish_n(conn, "pr.us", 5, start=21)
    us = await _run(conn, make(), lambda s: s.applied >= 5, consumer="us", filter_subject="pr.us")
    assert us.applied == 5 and us.suppressed == 0, us
    assert effects() == list(range(1, 26))


def test_the_handed_back_record_outlives_the_instance(ledger_and_effects) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: what an instance handed back is read by the next one (per
    stream, consumer and the consumer's life; a finished message leaves the record)."""
    make, _effects = ledger_and_effects
    with make() as ledger:
        assert ledger.handed_back("S", "c", "L1") == {}
        ledger.record_handed_back("S", "c", "L1", {7: 1, 9: 2}, [])
        ledger.record_handed_back("S", "d", "L1", {7: 5}, [])
        ledger.record_handed_back("S", "c", "L1", {9: 3}, [7])
    with make() as ledger:
        assert ledger.handed_back("S", "c", "L1") == {9: 3}
        assert ledger.handed_back("S", "d", "L1") == {7: 5}
        assert ledger.handed_back("T", "c", "L1") == {}
        # The consumer deleted and created again: its old life's rows are not read, and
        # go with the new life's first write.
        assert ledger.handed_back("S", "c", "L2") == {}
        ledger.record_handed_back("S", "c", "L2", {4: 1}, [])
        assert ledger.handed_back("S", "c", "L1") == {}
        assert ledger.handed_back("S", "c", "L2") == {4: 1}
        assert ledger.handed_back("S", "d", "L1") == {7: 5}
