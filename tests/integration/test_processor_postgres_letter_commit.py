"""A dead letter stored whose ledger commit is lost (the database failing between the
letter's PubAck and the commit): the commit is tried again in place, the message is not
handed to a handler again (this instance's or another's), its letter is not published
again, and the letter stays its one way in."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import psycopg
import pytest

import oncestream.process._handedback as handedback
from harness import publish_n
from oncestream import PostgresLedger, Processor, ProcessorOptions, connect
from oncestream.process import replay_dead_letters
from oncestream.streams import ResetTarget, reset_consumer
from tests.handlers import record, record_unless_7
from tests.integration.test_processor_forgotten_nak import COUNT as FORGOTTEN_COUNT
from tests.integration.test_processor_forgotten_nak import _opts as _forgotten_opts
from tests.integration.test_processor_max_deliver import _dead_letters
from tests.integration.test_processor_postgres import (
    _CUT_OPTIONS,
    _cut_at_last_attempt,
    _effects,
    _heal_cut,
    _limited_consumer,
    _started,
    _until_dropped,
)

pytestmark = pytest.mark.postgres

#: Two attempts, then a dead letter; the dead-letter stream's duplicate window is short
#: (``DLQ_WINDOW``), so a second publish of the letter would be stored as a second letter.
_OPTIONS = ProcessorOptions(
    batch=10, ack_wait=5, expires=1, backoff=(0.2,), max_deliver=2,
    dead_letter_stream="DLQ", prune_interval=0,
)  # fmt: skip
DLQ_WINDOW = 0.1
#: Commits of the letter's row lost: the first, then two retries in place.
LOST = 3


def _lose_commits(url: str) -> None:
    """A trigger that fails the commit of a transaction inserting the ledger row of a
    sequence :func:`_arm` names, as many times as it says (a database lost between the
    statement and the commit; the per-sequence counter is not rolled back)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS effects (id BIGINT NOT NULL)")
        admin.execute("CREATE TABLE lose_armed (on_seq BIGINT PRIMARY KEY, times INT, hang FLOAT)")
        admin.execute(
            "CREATE FUNCTION lose() RETURNS trigger LANGUAGE plpgsql AS $$"
            " DECLARE armed lose_armed; BEGIN"
            " SELECT * INTO armed FROM lose_armed WHERE on_seq = NEW.seq;"
            " IF FOUND AND nextval(('lost_' || NEW.seq)::regclass) <= armed.times THEN"
            " PERFORM pg_sleep(armed.hang);"
            " RAISE EXCEPTION 'the commit is lost'; END IF; RETURN NULL; END $$"
        )
        admin.execute(
            "CREATE CONSTRAINT TRIGGER lose AFTER INSERT ON oncestream_applied"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose()"
        )


def _arm(url: str, seq: int, times: int, hang: float = 0.0) -> None:
    """Lose the next ``times`` commits of seq ``seq``'s ledger row, each after ``hang``
    seconds (a database that hangs, failing over, before it fails)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SEQUENCE IF NOT EXISTS lost_{seq}")
        admin.execute(
            "INSERT INTO lose_armed VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (seq, times, hang),
        )


def _recorded(url: str, seq: int, stream: str = "DLJ") -> bool:
    """Whether the ledger row of ``stream`` seq ``seq`` is committed."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT 1 FROM oncestream_applied WHERE stream = %s AND seq = %s", (stream, seq)
        ).fetchone()
    return row is not None


class _Handler:
    """Records every message but 7; 7 fails at its first two deliveries (its second arms
    the lost commit), and from its third on fails or succeeds as ``fixed`` says."""

    def __init__(self, url: str, *, fixed: bool) -> None:
        self.url = url
        self.fixed = fixed
        #: Fixed for good (before the replay): 7 is recorded at any delivery.
        self.repaired = False
        #: The deliveries of 7 the handler was called at.
        self.deliveries_of_7: set[int] = set()

    def __call__(self, msg: Any, tx: Any) -> None:
        if int(msg.data) != 7 or self.repaired:
            record(msg, tx)
            return
        delivered = msg.metadata.num_delivered
        if delivered == 2:  # its last attempt: the letter's claim comes next
            _arm(self.url, msg.metadata.stream_seq, LOST)
        self.deliveries_of_7.add(delivered)
        if delivered >= 3 and self.fixed:  # a flaky handler, or one fixed meanwhile
            record(msg, tx)
            return
        raise ValueError("refusing 7")


@pytest.mark.parametrize(
    ("handler", "ack_policy"),
    [("handler-fixed", "explicit"), ("handler-failing", "explicit"), ("handler-fixed", "all")],
)
async def test_a_letter_whose_commit_is_lost_is_recorded_not_handled_again(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_url: str, handler: str, ack_policy: str
) -> None:
    """7's letter is stored and the commit of its ledger row fails three times: the
    Processor keeps 7 in progress and commits the row at its third retry. The handler
    is not called for 7 again, whether it would succeed at a later delivery
    (``handler-fixed``) or fail (``handler-failing``), and no second letter is published
    past the short duplicate window. A replay of the one letter then applies 7 once.
    Before, 7 was handed back: a handler that succeeded applied 7 and the replay applied
    it a second time; one that failed stored a second letter. With ack policy ``all``
    the one ack covers 7 once its row is committed."""
    opts = dataclasses.replace(_OPTIONS, ack_policy=ack_policy)
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=DLQ_WINDOW)
    ledger = PostgresLedger(postgres_url)
    ledger.open()  # its tables, for the trigger
    _lose_commits(postgres_url)
    fail_7 = _Handler(postgres_url, fixed=handler == "handler-fixed")
    proc = Processor(conn, "DLJ", "w", fail_7, ledger=ledger, options=opts)
    task = await _started(proc)
    try:
        await publish_n(conn, "dlj.x", 20, start=1)
        await proc.wait_until(
            lambda s: s.ledger_errors >= LOST and s.applied >= 19 and _recorded(postgres_url, 7),
            timeout=30,
        )
        assert not task.done(), task.exception()
    finally:
        proc.request_stop()
        await task
    assert proc.stats.applied == 19
    assert fail_7.deliveries_of_7 == {1, 2}
    assert proc.stats.dead_lettered == 1
    assert proc.stats.ledger_errors == LOST
    assert await _dead_letters(conn) == [7]
    assert _effects(postgres_url) == (19, 19)

    fail_7.repaired = True
    report = await replay_dead_letters(conn, "DLQ")
    assert len(report.replayed) == 1
    again = Processor(conn, "DLJ", "w", fail_7, ledger=PostgresLedger(postgres_url), options=opts)
    task = await _started(again)
    try:
        await again.wait_until(lambda s: s.applied == 1, timeout=30)
    finally:
        again.request_stop()
        await task
    assert _effects(postgres_url) == (20, 20)


#: Every third message of 30 fails twice, then would succeed (a handler fixed meanwhile).
POISON = frozenset(range(3, 31, 3))


async def test_no_instance_sharing_the_consumer_handles_a_letter_whose_commit_is_lost(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_url: str
) -> None:
    """Two Processors share one durable consumer (explicit acks, one PostgreSQL ledger);
    the commit of each poison message's letter row is lost once. The instance that
    stored the letter commits the row in place: neither instance calls a handler for a
    poison message again, each has one letter, and after the replay every message is
    applied once. Before (a break test), the message was handed back and the other
    instance, which did not know the letter, applied it."""
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=DLQ_WINDOW)
    ledger = PostgresLedger(postgres_url)
    ledger.open()
    _lose_commits(postgres_url)
    late: list[tuple[int, int]] = []
    repaired: list[bool] = []

    def handler(msg: Any, tx: Any) -> None:
        n, delivered = int(msg.data), msg.metadata.num_delivered
        if n not in POISON or repaired:
            record(msg, tx)
            return
        if delivered == 2:
            _arm(postgres_url, msg.metadata.stream_seq, 1)
        if delivered >= 3:  # only after the letter: must not happen
            late.append((n, delivered))
            record(msg, tx)
            return
        raise ValueError("poison")

    a = Processor(conn, "DLJ", "w", handler, ledger=ledger, options=_OPTIONS)
    b = Processor(conn, "DLJ", "w", handler, ledger=PostgresLedger(postgres_url), options=_OPTIONS)
    tasks = [await _started(a), await _started(b)]
    try:
        await publish_n(conn, "dlj.x", 30, start=1)
        deadline = time.monotonic() + 30  # two instances, no shared event: a bounded poll
        while not all(_recorded(postgres_url, seq) for seq in range(1, 31)):
            assert time.monotonic() < deadline and not any(t.done() for t in tasks)
            await asyncio.sleep(0.1)
    finally:
        a.request_stop()
        b.request_stop()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert late == []
    assert sorted(await _dead_letters(conn)) == sorted(POISON)
    assert a.stats.dead_lettered + b.stats.dead_lettered == len(POISON)
    assert a.stats.ledger_errors + b.stats.ledger_errors == len(POISON)
    assert _effects(postgres_url) == (20, 20)

    repaired.append(True)
    assert len((await replay_dead_letters(conn, "DLQ")).replayed) == len(POISON)
    again = Processor(
        conn, "DLJ", "w", handler, ledger=PostgresLedger(postgres_url), options=_OPTIONS
    )
    task = await _started(again)
    try:
        await again.wait_until(lambda s: s.applied == len(POISON), timeout=30)
    finally:
        again.request_stop()
        await task
    assert _effects(postgres_url) == (30, 30)


async def test_a_letter_commit_that_hangs_past_the_ack_wait_keeps_the_message(  # type: ignore[no-untyped-def]
    conn, options, make_stream, postgres_url: str
) -> None:
    """A Processor (ack wait 1 s, one attempt) stores the letter of message 1, whose row's
    first commit hangs 4 s and then fails. The Processor keeps the message in progress
    while the commit hangs: the server delivers it no second time (a watcher of every
    inbox sees each delivery), so no other Processor sharing the consumer could handle
    it while its letter waits for a replay. Before (a break test), in-progress acks went
    out only between the tries, and another Processor applied the message."""
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=DLQ_WINDOW)
    PostgresLedger(postgres_url).open()
    _lose_commits(postgres_url)
    _arm(postgres_url, 1, 1, hang=4.0)
    deliveries: list[int] = []  # of message 1 (stream seq 1): the delivery count of each

    def watch(subject: bytes, reply: bytes, data: Any, headers: bytes | None) -> None:
        tokens = reply.split(b".")  # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...
        if reply.startswith(b"$JS.ACK.DLJ.") and int(tokens[-4]) == 1:
            deliveries.append(int(tokens[-5]))

    def handler(msg: Any, tx: Any) -> None:
        if int(msg.data) == 1:
            raise ValueError("poison")
        record(msg, tx)

    opts = dataclasses.replace(_OPTIONS, ack_wait=1, max_deliver=1)
    async with await connect(options) as watcher:
        await watcher.subscribe_frames("_INBOX.>", watch)
        proc = Processor(
            conn, "DLJ", "w", handler, ledger=PostgresLedger(postgres_url), options=opts
        )
        task = await _started(proc)
        try:
            await publish_n(conn, "dlj.x", 20, start=1)
            await proc.wait_until(
                lambda s: s.applied == 19 and _recorded(postgres_url, 1), timeout=30
            )
        finally:
            proc.request_stop()
            await task
    assert proc.stats.ledger_errors == 1  # the hung commit, then one more try
    assert deliveries == [1]
    assert await _dead_letters(conn) == [1]
    assert _effects(postgres_url) == (19, 19)


async def test_a_dropped_message_whose_letter_commit_is_lost_gets_one_letter(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_server, postgres_url: str
) -> None:
    """The consumer's own ``max_deliver`` (3, the Processor's 2) and the database away from
    7's dead-letter claim on: the server drops 7, and its settling, once the database
    answers, stores the letter and loses the row's commit. The settling tried again a
    second later commits the row without publishing the letter again: one letter past a
    short duplicate window. Before, each retry published the letter again."""
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=DLQ_WINDOW)
    await _limited_consumer(conn)
    ledger, fail_7, _ = _cut_at_last_attempt(postgres_server.url, postgres_url)
    _lose_commits(postgres_url)
    _arm(postgres_url, 7, 1)  # the first commit of 7's row that reaches the database
    proc = Processor(conn, "DLJ", "w", fail_7, ledger=ledger, options=_CUT_OPTIONS)
    task = await _started(proc)
    try:
        try:
            await publish_n(conn, "dlj.x", 20, start=1)
            await _until_dropped(proc, task)
        finally:
            _heal_cut(postgres_server.url, postgres_url)
        await proc.wait_until(lambda s: s.applied == 19 and _recorded(postgres_url, 7), timeout=30)
        assert not task.done()
    finally:
        proc.request_stop()
        await task
    assert proc.stats.exhausted == 1 and proc.stats.dead_lettered == 1
    assert await _dead_letters(conn) == [7]
    assert _effects(postgres_url) == (19, 19)


async def test_a_forgotten_message_whose_letter_commit_is_lost_is_counted_once(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """7 is handed back and the server forgets it (its ack floor moved past the nak,
    nats-server#5727): the Processor settles it as dropped. The commit of its letter's
    row is lost once, so the settling runs again a second later. 7 is counted once as
    forgotten and once as exhausted, with one letter past a short duplicate window.
    Before, the retry counted it a second time."""
    monkeypatch.setattr(handedback, "FORGOTTEN_CHECK", 0.2)
    await make_stream("JOBS", ("jobs.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=DLQ_WINDOW)
    await publish_n(conn, "jobs.x", FORGOTTEN_COUNT, start=1)
    ledger = PostgresLedger(postgres_url)
    ledger.open()  # its tables, for the trigger
    _lose_commits(postgres_url)
    opts = _forgotten_opts(dead_letter_stream="DLQ")
    proc = Processor(conn, "JOBS", "w", record_unless_7, ledger=ledger, options=opts)
    task = await _started(proc)
    try:
        await proc.wait_until(
            lambda s: s.failed >= 1 and s.applied >= FORGOTTEN_COUNT - 1, timeout=20
        )
        _arm(postgres_url, 7, 1)  # the next commit of 7's row: its letter's
        await reset_consumer(conn, "JOBS", "w", ResetTarget(seq=8))  # the floor past 7
        await proc.wait_until(
            lambda s: s.dead_lettered >= 1 and s.ledger_errors >= 1
            and _recorded(postgres_url, 7, stream="JOBS"),
            timeout=30,
        )  # fmt: skip
        assert not task.done(), task.exception()
    finally:
        proc.request_stop()
        await task
    stats = proc.stats
    assert (stats.forgotten, stats.exhausted, stats.dead_lettered) == (1, 1, 1), stats
    assert stats.ledger_errors == 1, stats
    assert await _dead_letters(conn) == [7]
    assert _effects(postgres_url) == (FORGOTTEN_COUNT - 1, FORGOTTEN_COUNT - 1)
