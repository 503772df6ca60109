"""Dead letters of several consumers of one stream, against a real nats-server: each
consumer that gives up on a message writes its own letter, and a replayed letter is
applied by its consumer only, once; the other consumers ack the copy without applying it.

Before, the letter's msg id was ``dlq:<stream>:<seq>``: the second consumer's letter was
de-duplicated away (one letter, naming the first consumer), and every consumer of the
stream applied the replayed copy, also one that had applied the original.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from harness import publish_n
from oncestream import (
    Connection,
    ConnectOptions,
    Processor,
    ProcessorOptions,
    ProcessorStats,
    SQLiteLedger,
)
from oncestream.process import list_dead_letters, replay_dead_letters
from oncestream.process._replay import _publish
from oncestream.streams import get_message
from tests.handlers import record

STREAM, DLQ, SUBJECT = "ORDERS", "ORDERS_DLQ", "orders.eu"
BROKEN = 3  # message data "3": stream seq 4


def _handler(fixed: bool) -> Any:
    def handle(msg: Any, tx: Any) -> None:
        if not fixed and int(msg.data) == BROKEN:
            raise ValueError(f"cannot handle {msg.data.decode()}")
        record(msg, tx)

    return handle


async def _run(
    url: str, db: Path, consumer: str, until: Any, *, fixed: bool, **options: Any
) -> ProcessorStats:
    """Run ``consumer`` (its own ledger ``db``) until ``until(stats)``; its stats."""
    opts = ProcessorOptions(
        batch=50, max_deliver=1, backoff=(0.1,), dead_letter_stream=DLQ, **options
    )
    processor = Processor(
        ConnectOptions(servers=(url,)), STREAM, consumer, _handler(fixed),
        ledger=SQLiteLedger(db / f"{consumer}.db"), options=opts,
    )  # fmt: skip
    task = asyncio.create_task(processor.run())
    try:
        await processor.wait_until(until, 30)
    finally:
        await processor.stop()
        await task
    return processor.stats


def _ids(path: Path) -> list[int]:
    with sqlite3.connect(path) as con:
        return sorted(row[0] for row in con.execute("SELECT id FROM effects"))


async def test_each_consumer_dead_letters_and_applies_its_replay_once(
    nats_server, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    await make_stream(STREAM, ("orders.>",))
    await publish_n(conn, SUBJECT, 10)  # data 0..9 at seqs 1..10

    # a and b fail message 3 and dead-letter it; c applies it. a prunes its ledger
    # meanwhile: the replayed copy must not be taken for the pruned original.
    a = await _run(url, tmp_path, "a", lambda s: s.dead_lettered and s.pruned >= 9,
                   fixed=False, prune_interval=0.1, prune_grace=0.1)  # fmt: skip
    b = await _run(url, tmp_path, "b", lambda s: s.dead_lettered and s.applied >= 9, fixed=False)
    c = await _run(url, tmp_path, "c", lambda s: s.applied >= 10, fixed=True)
    assert (a.applied, b.applied, c.applied, c.dead_lettered) == (9, 9, 10, 0)

    letters = await list_dead_letters(conn, DLQ)
    assert [(x.consumer, x.sequence, x.per_consumer) for x in letters] == [
        ("a", 4, True),
        ("b", 4, True),
    ]
    stored = await get_message(conn, DLQ, seq=letters[1].seq)
    life = "".join(c for c in (await conn.stream_info(STREAM))["created"] if c.isdigit())
    assert stored.header("Nats-Msg-Id") == f"dlq:ORDERS:b:4:{life}"

    report = await replay_dead_letters(conn, DLQ)
    assert report.replayed == [x.seq for x in letters]
    copies = [await get_message(conn, STREAM, seq=seq) for seq in (11, 12)]
    assert [(m.header("Oncestream-Replay-For"), m.header("Oncestream-Replay-Stream"),
             m.header("Oncestream-Replay-Sequence")) for m in copies] == [
        ("a", STREAM, "4"), ("b", STREAM, "4"),
    ]  # fmt: skip
    # A second copy of a's letter (as a second letter of a for the message would give):
    # a applies the message once all the same.
    again = {**letters[0].replay_headers(), "Nats-Msg-Id": "a-again"}
    await _publish(conn, SUBJECT, letters[0].data, again)

    def handled(stats: ProcessorStats) -> bool:  # the three copies, however each ended
        return stats.applied + stats.suppressed + stats.replays_skipped >= 3

    a = await _run(url, tmp_path, "a", handled, fixed=True, prune_interval=0.1, prune_grace=0.1)
    b = await _run(url, tmp_path, "b", handled, fixed=True)
    c = await _run(url, tmp_path, "c", handled, fixed=True)
    assert (a.applied, a.suppressed, a.replays_skipped) == (1, 1, 1)
    assert (b.applied, b.suppressed, b.replays_skipped) == (1, 0, 2)
    assert (c.applied, c.suppressed, c.replays_skipped) == (0, 0, 3)
    for consumer in ("a", "b", "c"):
        assert _ids(tmp_path / f"{consumer}.db") == list(range(10)), consumer
        info = await conn.consumer_info(STREAM, consumer)
        assert (info["num_pending"], info["num_ack_pending"]) == (0, 0), consumer


async def test_a_letter_written_before_letters_were_per_consumer_is_applied_by_every_consumer(
    nats_server, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """An old letter (``dlq:<stream>:<seq>``, one per message) does not say which consumers
    failed the message: its copy names none, and every consumer applies it, as before."""
    url = nats_server.url
    await make_stream(STREAM, ("orders.>",))
    await make_stream(DLQ, (f"{DLQ}.>",))
    await publish_n(conn, SUBJECT, 1, start=7)
    old = {
        "Oncestream-Stream": STREAM, "Oncestream-Sequence": "1", "Oncestream-Subject": SUBJECT,
        "Oncestream-Consumer": "a", "Oncestream-Attempts": "5", "Oncestream-Error": "boom",
        "Nats-Msg-Id": f"dlq:{STREAM}:1",
    }  # fmt: skip
    await _publish(conn, f"{DLQ}.{STREAM}", b"7", old)
    (letter,) = await list_dead_letters(conn, DLQ)
    assert (letter.consumer, letter.per_consumer) == ("a", False)
    assert (await replay_dead_letters(conn, DLQ)).replayed == [letter.seq]
    copy = await get_message(conn, STREAM, seq=2)
    assert copy.header("Oncestream-Replay-Of") == f"{DLQ}:1"
    assert copy.header("Oncestream-Replay-For") is None
    for consumer in ("a", "b"):
        stats = await _run(url, tmp_path, consumer, lambda s: s.applied >= 2, fixed=True)
        assert (stats.applied, stats.replays_skipped) == (2, 0)
        assert _ids(tmp_path / f"{consumer}.db") == [7, 7]  # the original and its replay
