"""A consumer's ``max_deliver`` never makes a failing message disappear (issue 38, defect 3).

The server stops delivering a message after the consumer's ``max_deliver``
deliveries and moves its ack floor past it: nothing is pending, nothing is
unacknowledged, and no error is seen anywhere. The Processor refuses such a
consumer without a dead-letter stream, dead-letters before the server's last
delivery when the limit is lowered under it, and fails its run (``MaxDeliverError``)
when the server drops a message it did not apply or dead-letter. Each test ends in
one of: every message applied once or dead-lettered once, or the run failed naming
``max_deliver``; never "caught up" with a message missing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import oncestream.process._maxdeliver as maxdeliver_module
from harness import publish_n
from oncestream import (
    ConfigError,
    Connection,
    GroupMember,
    GroupOptions,
    MaxDeliverError,
    OncestreamError,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
)
from oncestream.process import partition_consumer
from oncestream.process._maxdeliver import DroppedMessages
from oncestream.streams import (
    ResetTarget,
    StreamSpec,
    ensure_stream,
    reset_consumer,
    update_consumer,
)
from tests._support import effects
from tests.handlers import record, record_unless_7, record_unless_broken

#: Messages 1..10; the handler fails on 7, every time.
COUNT = 10
#: The server's max-deliveries advisories, per stream and consumer.
ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"


def _opts(**kw: Any) -> ProcessorOptions:
    base: dict[str, Any] = {"batch": 10, "ack_wait": 5, "expires": 5, "backoff": (0.05,)}
    base.update(prune_interval=0)
    base.update(kw)
    return ProcessorOptions(**base)


async def _add_consumer(conn: Connection, name: str, max_deliver: int) -> None:
    config = {"durable_name": name, "ack_policy": "explicit", "max_deliver": max_deliver}
    await conn.api(f"CONSUMER.CREATE.JOBS.{name}", {"stream_name": "JOBS", "config": config})


async def _settled(conn: Connection, proc: Processor, task: asyncio.Task[Any]) -> None:
    """Until the run ends, or the consumer looks done: nothing pending, nothing unacked."""
    async with asyncio.timeout(30):
        while not task.done():
            info = await conn.consumer_info(proc.stream, proc.consumer)
            if not info["num_pending"] and not info["num_ack_pending"]:
                return
            await asyncio.wait({task}, timeout=0.1)


async def _dead_letters(conn: Connection) -> list[int]:
    """The original sequences of the messages in the DLQ stream."""
    info = await conn.stream_info("DLQ")
    seqs = []
    state = info["state"]
    first = max(int(state["first_seq"]), 1)  # past a purge; 0 in a stream never written
    for seq in range(first, int(state["last_seq"]) + 1 if state["messages"] else first):
        reply = await conn.api("STREAM.MSG.GET.DLQ", {"seq": seq})
        block = base64.b64decode(reply["message"].get("hdrs", "")).decode()
        for line in block.split("\r\n"):
            if line.startswith("Oncestream-Sequence:"):
                seqs.append(int(line.split(":", 1)[1]))
    return seqs


async def test_a_limited_consumer_without_dead_letter_stream_is_refused(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`consumer add --max-deliver 3`, no dead-letter stream: refused at start, nothing lost."""
    await make_stream("JOBS", ("jobs.>",))
    await publish_n(conn, "jobs.x", COUNT, start=1)
    await _add_consumer(conn, "w", 3)
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=_opts())
    task = asyncio.create_task(proc.run())
    await _settled(conn, proc, task)
    assert task.done(), f"no error, and the consumer shows nothing left: stats {proc.stats}"
    with pytest.raises(ConfigError) as refused:
        await task
    text = str(refused.value)
    assert "JOBS/w has max_deliver 3" in text
    assert "oncestream consumer edit JOBS w --max-deliver -1" in text
    assert "dead-letter stream" in text
    info = await conn.consumer_info("JOBS", "w")
    assert info["num_pending"] == COUNT  # refused before taking anything


async def test_max_deliver_lowered_under_a_processor_with_a_dead_letter_stream(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`consumer edit --max-deliver 2` under it: the failing message is dead-lettered once."""
    await make_stream("JOBS", ("jobs.>",))
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(dead_letter_stream="DLQ")  # max_deliver 5: above the consumer's new limit
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_running()
        await publish_n(conn, "jobs.x", 6, start=1)
        await proc.wait_until(lambda s: s.applied >= 6)
        await update_consumer(conn, "JOBS", "w", {"max_deliver": 2})
        await publish_n(conn, "jobs.x", COUNT - 6, start=7)
        await _settled(conn, proc, task)
    finally:
        await proc.stop()
    await task
    assert (proc.stats.applied, proc.stats.dead_lettered) == (COUNT - 1, 1), proc.stats
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)


@pytest.mark.parametrize("limit", [3, 1])
async def test_max_deliver_set_under_a_processor_without_dead_letter_stream(
    conn: Connection, make_stream, tmp_path: Path, limit: int
) -> None:  # type: ignore[no-untyped-def]
    """Without a dead-letter stream the run fails naming max_deliver, before the server
    drops the message: with the limit lifted, the next run applies it (limit 1: the
    failure was its last delivery, left unacked to come back after the ack wait)."""
    await make_stream("JOBS", ("jobs.>",))
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=_opts())
    task = asyncio.create_task(proc.run())
    await proc.wait_running()
    await publish_n(conn, "jobs.x", 6, start=1)
    await proc.wait_until(lambda s: s.applied >= 6)
    await update_consumer(conn, "JOBS", "w", {"max_deliver": limit})
    await publish_n(conn, "jobs.x", COUNT - 6, start=7)
    try:
        await _settled(conn, proc, task)
    finally:
        proc.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await task
    text = str(failed.value)
    assert f"consumer JOBS/w has max_deliver {limit} while this Processor runs" in text
    assert f"JOBS seq 7 failed (delivery 1 of {limit})" in text
    assert "oncestream consumer edit JOBS w --max-deliver -1" in text
    assert failed.value.seqs == () and failed.value.max_deliver == limit

    await update_consumer(conn, "JOBS", "w", {"max_deliver": -1})  # the fix it names
    fixed = Processor(conn, "JOBS", "w", record, ledger=ledger, options=_opts())
    task = asyncio.create_task(fixed.run())
    try:
        await fixed.wait_until(lambda s: s.applied >= 1, timeout=20)  # seq 7
        await fixed.wait_caught_up(10)
    finally:
        await fixed.stop()
    await task
    assert effects(tmp_path / "l.db") == (COUNT, COUNT)  # 7 was kept, and applied once


async def test_the_printed_fix_followed_after_the_ack_wait_keeps_the_message(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """max_deliver 1 set under the Processor, seq 7 fails on its only delivery; the fix is
    followed only after the ack wait, when the server has dropped seq 7: the error names
    that deadline and the way back (a reset to seq 7), and following it applies seq 7 once."""
    await make_stream("JOBS", ("jobs.>",))
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(ack_wait=2)
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    await proc.wait_running()
    await publish_n(conn, "jobs.x", 6, start=1)
    await proc.wait_until(lambda s: s.applied >= 6)
    await update_consumer(conn, "JOBS", "w", {"max_deliver": 1})
    await publish_n(conn, "jobs.x", COUNT - 6, start=7)
    try:
        await _settled(conn, proc, task)
    finally:
        proc.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await task
    text = str(failed.value)
    assert "ack wait (2s)" in text, text
    way_back = re.search(r"`oncestream consumer reset JOBS w --to-seq (\d+)`", text)
    assert way_back is not None, text
    # After the ack wait the server has given seq 7 up: nothing pending, nothing unacked.
    async with asyncio.timeout(20):
        while True:
            info = await conn.consumer_info("JOBS", "w")
            if not info["num_ack_pending"] and not info["num_pending"]:
                break
            await asyncio.sleep(0.1)
    await update_consumer(conn, "JOBS", "w", {"max_deliver": -1})  # the fix it names
    await reset_consumer(conn, "JOBS", "w", ResetTarget(seq=int(way_back.group(1))))
    fixed = Processor(conn, "JOBS", "w", record, ledger=ledger, options=opts)
    task = asyncio.create_task(fixed.run())
    try:
        await fixed.wait_until(lambda s: s.applied >= 1, timeout=20)  # seq 7
        await fixed.wait_caught_up(10)
    finally:
        await fixed.stop()
    await task
    assert effects(tmp_path / "l.db") == (COUNT, COUNT)  # 7 kept, everything applied once


@pytest.mark.parametrize("dead_letter", [False, True], ids=["no-dlq", "dlq"])
async def test_a_message_the_server_drops_under_a_bound_processor(
    conn: Connection, make_stream, tmp_path: Path, dead_letter: bool
) -> None:  # type: ignore[no-untyped-def]
    """bind=True makes no CONSUMER.INFO call: the server's advisory tells it of the drop."""
    await make_stream("JOBS", ("jobs.>",))
    if dead_letter:
        await make_stream("DLQ", ("DLQ.>",))
    await _add_consumer(conn, "w", 2)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(bind=True, dead_letter_stream="DLQ" if dead_letter else None)
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        if dead_letter:
            await _settled(conn, proc, task)
            await proc.wait_until(lambda s: s.dead_lettered >= 1, timeout=10)
        else:
            # The run ends by itself once the advisory is read: a stop requested when the
            # consumer looks settled could come first (the drop is then left to a reset).
            await asyncio.wait({task}, timeout=30)
    finally:
        proc.request_stop()
    if dead_letter:
        await task
        assert (proc.stats.applied, proc.stats.dead_lettered) == (COUNT - 1, 1), proc.stats
        assert proc.stats.exhausted == 1
        assert await _dead_letters(conn) == [7]
    else:
        with pytest.raises(MaxDeliverError) as failed:
            await task
        text = str(failed.value)
        assert "stopped delivering JOBS seq 7 after 2 deliveries" in text
        assert failed.value.seqs == (7,)
        assert proc.stats.exhausted == 1
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)


async def test_a_stop_before_a_drop_is_settled_fails_a_bound_run(
    conn: Connection, make_stream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """bind=True cannot move the consumer back to a drop a stop left unsettled: the run
    fails naming the reset to run (it used to return as if all went well)."""
    await make_stream("JOBS", ("jobs.>",))
    await _add_consumer(conn, "w", 2)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    settling = asyncio.Event()

    async def never_settles(
        self: DroppedMessages, conn: Connection, seq: int, n: int, **_: Any
    ) -> None:
        settling.set()
        await asyncio.Event().wait()  # the stop comes while this drop is being settled

    monkeypatch.setattr(DroppedMessages, "_dropped", never_settles)
    monkeypatch.setattr(maxdeliver_module, "_FINISH_ON_STOP", 0.5)  # the stop waits so long
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=_opts(bind=True))
    task = asyncio.create_task(proc.run())
    try:
        await asyncio.wait_for(settling.wait(), timeout=30)
    finally:
        proc.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await task
    assert failed.value.seqs == (7,)
    assert "run `oncestream consumer reset JOBS w --to-seq 7` before the next run" in str(
        failed.value
    )
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)


async def test_two_drops_out_of_order_are_named_together_from_the_first(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The error names every drop and the reset to the earliest: told of 14 before 7, a
    reset to 14 would leave 7 out for good (the run's first error named only 14)."""
    await make_stream("JOBS", ("jobs.>",))
    await _add_consumer(conn, "w", -1)
    await publish_n(conn, "jobs.x", 2 * COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(bind=True, backoff=(2.0,))  # 7 and 14 keep failing, slowly
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.failed >= 2, timeout=20)
        # As the server tells of drops: its advisories, 14 first (a consumer's drops
        # come in the order their ack waits end, not in sequence order).
        for seq in (14, 7):
            event = {"stream_seq": seq, "deliveries": 2}
            await conn.nc.publish(f"{ADVISORY}.JOBS.w", json.dumps(event).encode())
        with pytest.raises(MaxDeliverError) as failed:
            await asyncio.wait_for(asyncio.shield(task), timeout=30)
    finally:
        proc.request_stop()
    assert failed.value.seqs == (7, 14)
    assert "--to-seq 7`" in str(failed.value), failed.value


async def _group_stream(conn: Connection) -> None:
    """Stream GRP in 2 partitions by its second token, holding 1..20 (grp.k1 .. grp.k20)."""
    await ensure_stream(
        conn, StreamSpec(name="GRP", subjects=("grp.*",), partitions=2, partition_key=(1,))
    )
    for i in range(1, 21):
        await conn.nc.jetstream().publish(f"grp.k{i}", b"%d" % i)


def _group_member(conn: Connection, folder: Path, handler: Any, **options: Any) -> GroupMember:
    """Member ``a`` of group ``svc`` over GRP, an SQLite ledger per partition in ``folder``."""
    return GroupMember(
        conn,
        "GRP",
        "svc",
        handler,
        ledger=lambda p: SQLiteLedger(folder / f"svc-{p}.db"),
        options=GroupOptions(member="a", heartbeat=0.2, member_ttl=1),
        processor_options=_opts(pinned_ttl=2.0, **options),
    )


async def test_a_group_member_fails_when_a_released_partition_leaves_a_drop_to_a_reset(
    conn: Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A partition released at stop with a drop unsettled, and the move back refused: the
    member's run fails naming the reset (it returned normally, the error swallowed).
    The drop is told by hand: a consumer's max_deliver set under running partitions
    ends them on the next failure first (another path)."""
    await _group_stream(conn)
    settling = asyncio.Event()

    async def never_settles(
        self: DroppedMessages, conn: Connection, seq: int, n: int, **_: Any
    ) -> None:
        settling.set()
        await asyncio.Event().wait()

    async def refused(*_args: Any, **_kwargs: Any) -> None:
        raise OncestreamError("reset refused (as by a server that lost its leader)")

    monkeypatch.setattr(DroppedMessages, "_dropped", never_settles)
    monkeypatch.setattr(maxdeliver_module, "_FINISH_ON_STOP", 0.5)  # the stop waits so long
    monkeypatch.setattr(maxdeliver_module, "reset_consumer", refused)
    member = _group_member(conn, tmp_path, record)
    task = asyncio.create_task(member.run())
    try:
        await member.wait_running()
        # Each partition applying: its Processor listens to the advisories (before its
        # first pull).
        await member.wait_for(
            lambda m: (
                len(m.stats.processors) == 2 and all(s.applied for s in m.stats.processors.values())
            ),
            timeout=20,
        )
        for partition in range(2):  # a drop of seq 7 told to both partitions' Processors
            event = {"stream_seq": 7, "deliveries": 2}
            subject = f"{ADVISORY}.GRP.{partition_consumer('svc', partition)}"
            await conn.nc.publish(subject, json.dumps(event).encode())
        await asyncio.wait_for(settling.wait(), timeout=30)
    finally:
        member.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await asyncio.wait_for(task, timeout=30)
    assert failed.value.seqs == (7,)
    assert "--to-seq 7" in str(failed.value) and "reset refused" in str(failed.value)


async def test_a_group_member_fails_when_a_partition_fails_with_max_deliver(
    conn: Connection, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """max_deliver set on a running member's consumers: the partition's MaxDeliverError
    ends the member (it restarted the partition, which was refused with a ConfigError
    naming no reset, and the dropped message was left out of the next run)."""
    await _group_stream(conn)
    member = _group_member(conn, tmp_path, record_unless_7, backoff=(0.5,))  # 7 and 14 fail
    task = asyncio.create_task(member.run())
    try:
        await member.wait_for(
            lambda m: sum(s.failed for s in m.stats.processors.values()) >= 2, timeout=20
        )
        for partition in range(2):
            consumer = partition_consumer("svc", partition)
            await update_consumer(conn, "GRP", consumer, {"max_deliver": 2})
        with pytest.raises(MaxDeliverError) as failed:
            await asyncio.wait_for(asyncio.shield(task), timeout=30)
    finally:
        member.request_stop()
    text = str(failed.value)
    assert "--max-deliver -1" in text, text
    # What the message says to do, then a member with the handler fixed: each message once.
    for partition in range(2):
        consumer = partition_consumer("svc", partition)
        await update_consumer(conn, "GRP", consumer, {"max_deliver": -1})
    for target in re.findall(r"consumer reset GRP (svc-p\d) --to-seq (\d+)", text):
        await reset_consumer(conn, "GRP", target[0], ResetTarget(seq=int(target[1])))
    again = _group_member(conn, tmp_path, record)
    task = asyncio.create_task(again.run())
    try:
        await again.wait_for(
            lambda m: sum(s.applied for s in m.stats.processors.values()) >= 2, timeout=30
        )
    finally:
        again.request_stop()
        await task
    rows = [effects(tmp_path / f"svc-{p}.db") for p in range(2)]
    assert sum(r[0] for r in rows) == 20 and all(r[0] == r[1] for r in rows), rows


class _HeldCommitLedger(SQLiteLedger):
    """A ledger whose first transaction after the server dropped a message (the drop's:
    dead letter published, row recorded) commits only once the run is stopping."""

    def __init__(self, path: Path, proc: list[Processor], stopping: threading.Event) -> None:
        super().__init__(path)
        self.proc, self.stopping = proc, stopping
        self.committing = threading.Event()

    def begin(self) -> Any:
        tx = super().begin()
        if self.proc and self.proc[0].stats.exhausted and not self.committing.is_set():
            self.hold(tx)
        return tx

    def hold(self, tx: Any) -> None:
        """``tx``'s commit waits for the stop (``committing`` says it began)."""
        commit = tx.commit

        def held() -> None:
            self.committing.set()
            assert self.stopping.wait(30), "the run never stopped"
            commit()

        tx.commit = held


class _Stopping(logging.Handler):
    """Sets ``event`` at the drop watcher's stop: it finishes the drop, or gives it up."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "finishing the drop" in text or "stopped before settling" in text:
            self.event.set()


@contextmanager
def released_at_stop(stopping: threading.Event) -> Iterator[None]:
    """While inside, the drop watcher's log at a stop sets ``stopping`` (what a held
    commit waits for)."""
    watcher = logging.getLogger(maxdeliver_module.__name__)
    handler, level = _Stopping(stopping), watcher.level
    watcher.addHandler(handler)
    watcher.setLevel(logging.INFO)
    try:
        yield
    finally:
        watcher.removeHandler(handler)
        watcher.setLevel(level)


async def test_a_stop_while_a_dead_letter_commits_finishes_it(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """make test run of 2026-11-29: a stop right after the dead letter was published, its
    ledger row still committing, failed the run with MaxDeliverError naming a reset of a
    message that was dead-lettered (the drop's settling was cut short). Now the stop lets
    it finish: the run ends cleanly, seq 7 dead-lettered once, nothing left to reset.
    Shown failing before the fix (MaxDeliverError: the run stopped before settling)."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await _add_consumer(conn, "w", 2)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    stopping = threading.Event()
    holder: list[Processor] = []
    ledger = _HeldCommitLedger(tmp_path / "l.db", holder, stopping)
    opts = _opts(bind=True, dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    holder.append(proc)
    task = asyncio.create_task(proc.run())
    with released_at_stop(stopping):
        try:
            assert await asyncio.to_thread(ledger.committing.wait, 30)
            assert proc.stats.dead_lettered == 1
            proc.request_stop()
            async with asyncio.timeout(60):
                await task
        finally:
            proc.request_stop()
            stopping.set()
    assert (proc.stats.applied, proc.stats.dead_lettered) == (COUNT - 1, 1), proc.stats
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)
    info = await conn.consumer_info("JOBS", "w")
    assert (info["num_pending"], info["num_ack_pending"]) == (0, 0), info


class _MovingLedger(SQLiteLedger):
    """A ledger whose registry row, read in the first transaction after the server
    dropped a message, is another consumer's filters (as if registered meanwhile)."""

    def __init__(self, path: Path, proc: list[Processor]) -> None:
        super().__init__(path)
        self.proc, self.moved = proc, 0

    def begin(self) -> Any:
        tx = super().begin()
        if self.proc and self.proc[0].stats.exhausted and not self.moved:
            self.moved += 1
            tx.registered = lambda stream, consumer: ("other.>",)
        return tx


async def test_a_registry_move_while_settling_a_dropped_message_stops_the_run(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Review w5b, finding 3: the drop's transaction finds the subject outside the row:
    the bound Processor stops with ConfigError, the message neither dead-lettered nor
    acked. Shown failing before the fix: the drop task ended silently, the run exited
    normally with nothing dead-lettered."""
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await _add_consumer(conn, "w", 2)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    holder: list[Processor] = []
    ledger = _MovingLedger(tmp_path / "l.db", holder)
    opts = _opts(bind=True, dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    holder.append(proc)
    task = asyncio.create_task(proc.run())
    try:
        async with asyncio.timeout(30):
            await asyncio.wait({task}, timeout=20)
    finally:
        proc.request_stop()
    with pytest.raises(ConfigError, match="outside the filters registered"):
        await task
    assert ledger.moved == 1
    assert proc.stats.exhausted == 1 and proc.stats.dead_lettered == 0
    assert await _dead_letters(conn) == []


async def _full_dlq(conn: Connection, room: int = 1) -> None:
    """A dead-letter stream with room for ``room`` messages, holding as many: it refuses
    the next."""
    config = {"name": "DLQ", "subjects": ["DLQ.>"], "max_msgs": room, "discard": "new"}
    await conn.api("STREAM.CREATE.DLQ", config)
    await publish_n(conn, "DLQ.JOBS", room, data=lambda _: b"an earlier dead letter")
    info = await conn.stream_info("DLQ")
    assert info["state"]["messages"] == room


@pytest.mark.parametrize("count", [COUNT, 2 * COUNT], ids=["seq-7", "seqs-7-14"])
async def test_a_full_dead_letter_stream_never_loses_the_message_on_restart(
    conn: Connection, make_stream, tmp_path: Path, count: int
) -> None:  # type: ignore[no-untyped-def]
    """Issue 48: consumer max_deliver 3, a Processor dead-lettering after 2 attempts, the
    dead-letter stream full. The server drops seq 7 after its 3rd delivery; its dead
    letter is refused: the run fails with MaxDeliverError naming the way back, and the
    restarts deliver seq 7 again until it can be dead-lettered (before the fix the error
    named no way back and a plain restart ended "caught up" with seq 7 neither applied
    nor dead-lettered). With 7 and 14 failing, the drop of 14 settled after 7's must not
    move the consumer forward past 7."""
    failing = list(range(7, count + 1, 7))
    await make_stream("JOBS", ("jobs.>",))
    await _full_dlq(conn, room=len(failing))
    await _add_consumer(conn, "w", 3)
    await publish_n(conn, "jobs.x", count, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(max_deliver=2, dead_letter_stream="DLQ")

    async def run_once(*, fails: bool) -> tuple[Processor, BaseException | None]:
        """A run to its end: its own (the error), or stopped once seq 7 is dead-lettered."""
        proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
        task = asyncio.create_task(proc.run())
        try:
            if fails:
                await asyncio.wait({task}, timeout=30)
            else:
                await proc.wait_until(lambda s: s.dead_lettered >= len(failing), timeout=30)
                await proc.wait_caught_up(10)
        finally:
            proc.request_stop()
        try:
            await task
        except MaxDeliverError as exc:
            return proc, exc
        return proc, None

    first, failed = await run_once(fails=True)
    assert isinstance(failed, MaxDeliverError), f"no error; stats {first.stats}"
    text = str(failed)
    assert re.search(r"stopped delivering JOBS seq (7|14) after 3 deliveries", text), text
    assert "maximum messages exceeded" in text, text  # why the dead letter was refused
    assert re.search(r"The consumer was moved back to seq (7|14)", text), text
    assert "make room in the dead-letter stream DLQ" in text, text
    assert failed.seqs[0] in failing, failed.seqs  # 14's advisory may come first
    assert first.stats.applied == count - len(failing)
    # The server holds seq 7 again: the restart finds it (the dead-letter stream still
    # full: it fails again, never "caught up" with seq 7 missing).
    info = await conn.consumer_info("JOBS", "w")
    assert info["ack_floor"]["stream_seq"] == 6, info  # (delivered again meanwhile: unacked)
    again, failed = await run_once(fails=True)
    assert isinstance(failed, MaxDeliverError), f"restart ended without seq 7: {again.stats}"
    assert re.search(r"moved back to seq (7|14)", str(failed)), failed
    assert again.stats.applied == 0, again.stats  # the others delivered again: in the ledger

    await conn.api("STREAM.PURGE.DLQ", {})  # the room it asks for
    last, failed = await run_once(fails=False)
    assert failed is None, failed
    assert (last.stats.applied, last.stats.dead_lettered) == (0, len(failing)), last.stats
    assert sorted(await _dead_letters(conn)) == failing
    done = count - len(failing)
    assert effects(tmp_path / "l.db") == (done, done)  # each applied once


async def test_a_bound_processor_names_the_reset_for_a_refused_dead_letter(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """bind=True makes no consumer API call: the error names the reset to run, as the
    no-dead-letter-stream path does; run as printed, seq 7 is dead-lettered once."""
    await make_stream("JOBS", ("jobs.>",))
    await _full_dlq(conn)
    await _add_consumer(conn, "w", 2)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    ledger = SQLiteLedger(tmp_path / "l.db")
    opts = _opts(bind=True, dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    try:
        await asyncio.wait({task}, timeout=30)  # it ends by itself
    finally:
        proc.request_stop()
    with pytest.raises(MaxDeliverError) as failed:
        await task
    text = str(failed.value)
    way_back = re.search(r"`oncestream consumer reset JOBS w --to-seq (\d+)`", text)
    assert way_back is not None and way_back.group(1) == "7", text
    assert "make room in the dead-letter stream DLQ" in text, text
    await conn.api("STREAM.PURGE.DLQ", {})
    await reset_consumer(conn, "JOBS", "w", ResetTarget(seq=7))
    fixed = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = asyncio.create_task(fixed.run())
    try:
        await fixed.wait_until(lambda s: s.dead_lettered >= 1, timeout=20)
    finally:
        await fixed.stop()
    await task
    assert await _dead_letters(conn) == [7]
    assert effects(tmp_path / "l.db") == (COUNT - 1, COUNT - 1)


async def test_a_dropped_replayed_copy_leaves_its_letter_replayable(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: the server drops seq 7, then its replayed copy (bind=True: the
    advisory settles both). The copy's letter names the message; replayed once the
    handler is fixed, its copy is applied. Before, the dropped copy's key was recorded
    with its letter, and the next copy was suppressed: never applied."""
    from oncestream.process import replay_dead_letters

    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",))
    await _add_consumer(conn, "w", 2)
    await publish_n(conn, "jobs.x", COUNT, start=1)
    db = tmp_path / "l.db"
    broken = {7}
    handler = record_unless_broken(broken)

    async def run_until(done: Any) -> Processor:
        opts = _opts(bind=True, dead_letter_stream="DLQ")
        proc = Processor(conn, "JOBS", "w", handler, ledger=SQLiteLedger(db), options=opts)
        task = asyncio.create_task(proc.run())
        try:
            await proc.wait_until(done, timeout=30)
        finally:
            proc.request_stop()
        await task
        return proc

    first = await run_until(lambda s: s.dead_lettered >= 1 and s.applied >= COUNT - 1)
    assert first.stats.exhausted == 1
    assert len((await replay_dead_letters(conn, "DLQ")).replayed) == 1  # the copy: seq 11
    copy = await run_until(lambda s: s.dead_lettered >= 1)
    assert (copy.stats.exhausted, copy.stats.applied) == (1, 0), copy.stats
    broken.clear()  # the handler is fixed
    assert len((await replay_dead_letters(conn, "DLQ")).replayed) == 1  # seq 12
    fixed = await run_until(lambda s: s.applied + s.suppressed >= 1)
    assert (fixed.stats.applied, fixed.stats.suppressed) == (1, 0), fixed.stats
    assert effects(db) == (COUNT, COUNT)
