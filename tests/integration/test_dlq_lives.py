"""Dead letters across the lives of a stream and across rounds of replay, against a real
nats-server.

- A stream deleted and created again numbers other messages from 1. Before, the new
  stream's letter of seq N had the msg id of the old stream's letter of seq N
  (``dlq:<stream>:<consumer>:<seq>``): within the dead-letter stream's duplicate window
  the server dropped it as a duplicate while the Processor counted it dead-lettered and
  terminated the message (lost); after the window, its replayed copy was claimed under
  the old copy's ledger key ``(<stream>.replay.<consumer>, <seq>)``, which the documented
  ledger cleanup does not delete: suppressed, never applied. A letter and its copy's key
  now carry the stream's creation time.
- A copy that fails again: before, its letter recorded the copy's sequence and id (and
  the copy's stale ``Oncestream-Replay-*`` headers), so its replay was claimed under
  another key than the first copy's, and "once per original message" broke in a second
  round. The letter now records the original stream, sequence and msg id.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness import publish_n
from oncestream import Connection, ConnectOptions, Processor, ProcessorOptions, SQLiteLedger
from oncestream.process import list_dead_letters, replay_dead_letters
from oncestream.process._replay import _publish, failed_at
from oncestream.process._replayed import life_token
from oncestream.streams import get_message
from tests.handlers import record

STREAM, DLQ, SUBJECT, CONSUMER = "ORDERS", "ORDERS_DLQ", "orders.eu", "billing"
#: The SQLite statements docs/processing.md ("One ledger, which consumers") gives for a
#: stream deleted and created again, when nothing of the old stream is needed any more.
CLEANUP = [
    f"DELETE FROM {table} WHERE stream = 'ORDERS'"
    for table in (
        "oncestream_applied_runs",
        "oncestream_msg_ids",
        "oncestream_pruned",
        "oncestream_consumers",
    )
]


def _handler(broken: set[int]) -> Any:
    def handle(msg: Any, tx: Any) -> None:
        if int(msg.data) in broken:
            raise ValueError(f"cannot handle {msg.data.decode()}")
        record(msg, tx)

    return handle


async def _run(url: str, ledger: Path, until: Any, broken: set[int]) -> Any:
    opts = ProcessorOptions(batch=50, max_deliver=1, backoff=(0.1,), dead_letter_stream=DLQ)
    processor = Processor(
        ConnectOptions(servers=(url,)), STREAM, CONSUMER, _handler(broken),
        ledger=SQLiteLedger(ledger), options=opts,
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


@pytest.mark.parametrize("window", [0.1, 120.0], ids=["window-passed", "within-window"])
async def test_a_recreated_streams_dead_letter_is_stored_and_its_replay_applied(
    nats_server, conn: Connection, make_stream, tmp_path: Path, window: float
) -> None:  # type: ignore[no-untyped-def]
    url, ledger = nats_server.url, tmp_path / "billing.db"
    await make_stream(DLQ, (f"{DLQ}.>",), duplicate_window=window)
    stamps: list[tuple[str, Any, Any]] = []

    for life, base in enumerate((0, 10)):  # data base..base+4 at seqs 1..5; seq 4 fails
        if life:
            # A window of 0.1 s (the server's least) has passed since the old letter was
            # stored, unless the runs took less: a time the server keeps, no event to await.
            age = (datetime.now(UTC) - stamps[-1][1].time).total_seconds()
            await asyncio.sleep(max(0.0, window - age) if window < 1 else 0.0)
            await conn.api(f"STREAM.DELETE.{STREAM}", {})
            with sqlite3.connect(ledger) as con:  # the documented cleanup, as written
                for statement in CLEANUP:
                    con.execute(statement)
        created = await make_stream(STREAM, ("orders.>",))
        await publish_n(conn, SUBJECT, 5, start=base)
        stats = await _run(url, ledger, lambda s: s.applied >= 4 and s.dead_lettered, {base + 3})
        assert (stats.applied, stats.dead_lettered) == (4, 1)
        (letter,) = await list_dead_letters(conn, DLQ)  # before: none in the new life
        assert (letter.stream, letter.sequence, letter.consumer) == (STREAM, 4, CONSUMER)
        assert (await replay_dead_letters(conn, DLQ)).replayed == [letter.seq]
        stats = await _run(url, ledger, lambda s: s.applied + s.suppressed >= 1, set())
        assert (stats.applied, stats.suppressed) == (1, 0)  # before: (0, 1) in the new life
        assert _ids(ledger) == [*range(5), *range(10, 15)][: 5 * (life + 1)]
        copy = await get_message(conn, STREAM, seq=6)
        stamps.append((created["created"], letter, copy))
    # Each letter and its copy name their stream's life: its creation time.
    for created, letter, copy in stamps:
        assert letter.stream_created == created
        assert copy.header("Oncestream-Replay-Stream-Created") == created
    # The documented statement that deletes the replay rows too: both lives', no other's.
    lives = [f"ORDERS.replay.billing.{life_token(created)}" for created, _, _ in stamps]
    others = ["ORDERS2", "ORDERS2.replay.billing.1"]  # another stream's, named alike
    query = "SELECT DISTINCT stream FROM oncestream_applied_runs ORDER BY stream"
    with sqlite3.connect(ledger) as con:
        for other in others:
            con.execute(f"INSERT INTO oncestream_applied_runs VALUES ('{other}', 1, 1, 0)")
        assert [row[0] for row in con.execute(query)] == ["ORDERS", *lives, *others]
        con.execute(
            "DELETE FROM oncestream_applied_runs WHERE stream = 'ORDERS'"
            " OR substr(stream, 1, 14) = 'ORDERS.replay.'"
        )
        assert [row[0] for row in con.execute(query)] == others


async def test_a_copy_that_fails_again_is_dead_lettered_as_the_original(
    nats_server, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    url, ledger = nats_server.url, tmp_path / "billing.db"
    await make_stream(STREAM, ("orders.>",))
    await publish_n(conn, SUBJECT, 5, msg_id=lambda i: f"order-{i}")
    stats = await _run(url, ledger, lambda s: s.applied >= 4 and s.dead_lettered, {3})
    (first,) = await list_dead_letters(conn, DLQ)
    assert (await replay_dead_letters(conn, DLQ)).replayed == [first.seq]

    # The copy (seq 6) fails again: its letter names the original, not the copy.
    stats = await _run(url, ledger, lambda s: s.dead_lettered, {3})
    assert (stats.applied, stats.dead_lettered) == (0, 1)
    (second,) = await list_dead_letters(conn, DLQ)
    assert (second.stream, second.sequence, second.msg_id) == (STREAM, 4, "order-3")
    assert second.per_consumer and second.stream_created == first.stream_created
    stored = await get_message(conn, DLQ, seq=second.seq)
    assert not [name for name in stored.headers if name.startswith("Oncestream-Replay-")]
    assert (await replay_dead_letters(conn, DLQ)).replayed == [second.seq]
    # A second copy of the first round's letter (as a retried replay beyond the window
    # would give): the same message for the same consumer, applied once in all.
    await _publish(conn, SUBJECT, first.data, {**first.replay_headers(), "Nats-Msg-Id": "again"})

    stats = await _run(url, ledger, lambda s: s.applied + s.suppressed >= 2, set())
    assert (stats.applied, stats.suppressed) == (1, 1)  # before: (2, 0)
    assert _ids(ledger) == [0, 1, 2, 3, 4]


async def test_a_second_letter_from_an_earlier_life_is_replayed_and_applied_once(
    nats_server, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md: a letter of the old stream's seq 4, replayed after the stream was
    created again (its copy is the new stream's seq 1), and a second letter of it (the
    message dead-lettered again past the window). Sequences of two lives cannot be
    compared (nats-server has also rewritten a stream's creation time without creating it
    again), so the second letter is replayed too: its copy shares the first copy's ledger
    key and is suppressed."""
    url = nats_server.url
    window = 0.1  # the server's least
    await make_stream(DLQ, (f"{DLQ}.>",), duplicate_window=window)
    await make_stream(STREAM, ("orders.>",))
    await publish_n(conn, SUBJECT, 5)
    await _run(url, tmp_path / "billing.db", lambda s: s.applied >= 4 and s.dead_lettered, {3})
    (first,) = await list_dead_letters(conn, DLQ)
    stored = await get_message(conn, DLQ, seq=first.seq)
    await conn.api(f"STREAM.DELETE.{STREAM}", {})
    await make_stream(STREAM, ("orders.>",))
    ledger = tmp_path / "billing-new.db"  # a new ledger for the new stream, as documented
    await _run(url, ledger, lambda s: True, set())  # the consumer of the new stream
    assert (await replay_dead_letters(conn, DLQ)).replayed == [first.seq]
    # The letter again, byte for byte as the Processor writes it when the message fails
    # again, once the window has passed (a time the server keeps, no event to await:
    # bounded retries while the server still calls it a duplicate).
    headers = {k: v[0] for k, v in stored.headers.items()}
    for _ in range(100):
        ack = await _publish(conn, first.dlq_subject, stored.data, headers)
        if not ack.get("duplicate"):
            break
        await asyncio.sleep(window / 2)
    (second,) = await list_dead_letters(conn, DLQ)
    assert second.seq != first.seq and failed_at(second) == failed_at(first)
    report = await replay_dead_letters(conn, DLQ)
    assert (report.replayed, report.already_replayed) == ([second.seq], []), report
    assert (await conn.stream_info(STREAM))["state"]["messages"] == 2  # two copies
    stats = await _run(url, ledger, lambda s: s.applied + s.suppressed >= 2, set())
    assert (stats.applied, stats.suppressed) == (1, 1)
    assert _ids(ledger) == [3]
