"""A dead letter stored whose ledger commit is lost (the database failing between the
letter's PubAck and the commit): the message is not handed to its handler again, its
letter is not published again, and the letter stays its one way in."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from harness import publish_n
from oncestream import PostgresLedger, Processor, ProcessorOptions
from oncestream.process import replay_dead_letters
from tests.handlers import record
from tests.integration.test_processor_max_deliver import _dead_letters
from tests.integration.test_processor_postgres import _effects, _started

pytestmark = pytest.mark.postgres

#: Two attempts, then a dead letter; the dead-letter stream's duplicate window is short
#: (``DLQ_WINDOW``), so a second publish of the letter would be stored as a second letter.
_OPTIONS = ProcessorOptions(
    batch=10, ack_wait=5, expires=1, backoff=(0.2,), max_deliver=2,
    dead_letter_stream="DLQ", prune_interval=0,
)  # fmt: skip
DLQ_WINDOW = 0.1


def _lose_commits(url: str, times: int) -> None:
    """A trigger that fails, ``times`` times, the commit of a transaction inserting the
    ledger row of the sequence the ``armed`` table names (a database lost between the
    statement and the commit; the sequence ``fired`` is not rolled back)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGINT NOT NULL)")
        admin.execute("CREATE TABLE armed (on_seq BIGINT NOT NULL)")
        admin.execute("CREATE SEQUENCE fired")
        admin.execute(
            "CREATE FUNCTION lose() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF EXISTS (SELECT 1 FROM armed WHERE on_seq = NEW.seq)"
            f" AND nextval('fired') <= {times} THEN"
            " RAISE EXCEPTION 'the commit is lost'; END IF; RETURN NULL; END $$"
        )
        admin.execute(
            "CREATE CONSTRAINT TRIGGER lose AFTER INSERT ON oncestream_applied"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lose()"
        )


def _recorded(url: str, seq: int) -> bool:
    """Whether the ledger row of DLJ seq ``seq`` is committed."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT 1 FROM oncestream_applied WHERE stream = 'DLJ' AND seq = %s", (seq,)
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
        if delivered == 2 and delivered not in self.deliveries_of_7:  # the claim comes next
            with psycopg.connect(self.url, autocommit=True) as admin:
                admin.execute("INSERT INTO armed VALUES (%s)", (msg.metadata.stream_seq,))
        self.deliveries_of_7.add(delivered)
        if delivered >= 3 and self.fixed:  # a flaky handler, or one fixed meanwhile
            record(msg, tx)
            return
        raise ValueError("refusing 7")


@pytest.mark.parametrize(
    ("redelivered", "ack_policy"),
    [
        ("handler-fixed", "explicit"),
        ("handler-failing", "explicit"),
        ("dropped", "explicit"),
        ("handler-fixed", "all"),
    ],
)
async def test_a_letter_whose_commit_is_lost_is_recorded_not_handled_again(  # type: ignore[no-untyped-def]
    conn, make_stream, postgres_url: str, redelivered: str, ack_policy: str
) -> None:
    """7's letter is stored and the commit of its ledger row fails. Its next delivery
    (or, ``dropped``: the consumer's own ``max_deliver`` is 3, the commit is lost at that
    delivery too, the server drops it and the Processor settles it) only commits the
    row: the handler is not called for 7 again, whether it would succeed
    (``handler-fixed``) or fail (``handler-failing``), and no second letter is published
    past the short duplicate window. A replay of the one letter then applies 7 once.
    Before, a handler that succeeded applied 7 and the replay applied it a second time;
    one that failed stored a second letter. With ack policy ``all`` the one ack covers 7
    once its row is committed."""
    opts = dataclasses.replace(_OPTIONS, ack_policy=ack_policy)
    await make_stream("DLJ", ("dlj.>",))
    await make_stream("DLQ", ("DLQ.>",), duplicate_window=DLQ_WINDOW)
    if redelivered == "dropped":  # its third delivery's commit is lost too: then dropped
        config = {"durable_name": "w", "ack_policy": "explicit", "max_deliver": 3}
        await conn.api("CONSUMER.CREATE.DLJ.w", {"stream_name": "DLJ", "config": config})
    ledger = PostgresLedger(postgres_url)
    ledger.open()  # its tables, for the trigger
    _lose_commits(postgres_url, 2 if redelivered == "dropped" else 1)
    handler = _Handler(postgres_url, fixed=redelivered == "handler-fixed")
    proc = Processor(conn, "DLJ", "w", handler, ledger=ledger, options=opts)
    task = await _started(proc)
    try:
        await publish_n(conn, "dlj.x", 20, start=1)
        await proc.wait_until(
            lambda s: s.ledger_errors >= 1 and s.applied >= 19 and _recorded(postgres_url, 7),
            timeout=30,
        )
        assert not task.done(), task.exception()
    finally:
        proc.request_stop()
        await task
    assert proc.stats.applied == 19
    assert handler.deliveries_of_7 == {1, 2}
    assert proc.stats.dead_lettered == 1
    assert proc.stats.exhausted == (1 if redelivered == "dropped" else 0)
    assert await _dead_letters(conn) == [7]
    assert _effects(postgres_url) == (19, 19)

    handler.repaired = True
    report = await replay_dead_letters(conn, "DLQ")
    assert len(report.replayed) == 1
    again = Processor(conn, "DLJ", "w", handler, ledger=PostgresLedger(postgres_url), options=opts)
    task = await _started(again)
    try:
        await again.wait_until(lambda s: s.applied == 1, timeout=30)
    finally:
        again.request_stop()
        await task
    assert _effects(postgres_url) == (20, 20)
