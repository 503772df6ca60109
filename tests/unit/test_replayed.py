"""Dead letters per consumer and their replayed copies: the headers, the ledger key a copy
is claimed under (on a real SQLite ledger, no server), the replay's target subject on a
partitioned stream, and the dead-letter stream's config."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from oncestream import SQLiteLedger
from oncestream._headers import render_block
from oncestream._message import Message
from oncestream.ledger import LedgerEntry, Registration
from oncestream.process._applying import Applier
from oncestream.process._bound import BoundConsumer
from oncestream.process._ledgercalls import LedgerCalls
from oncestream.process._options import ProcessorOptions, ProcessorStats
from oncestream.process._replay import DeadLetter, _Target
from oncestream.process._replayed import letter_msg_id, replay_entry, replay_target
from oncestream.process._setup import dead_letter_stream_config
from oncestream.streams import Partitioning, StoredMessage


def _letter(msg_id: str, consumer: str = "billing", subject: str = "orders.eu") -> DeadLetter:
    headers = {
        "Trace": "t-1", "Oncestream-Stream": "ORDERS", "Oncestream-Sequence": "42",
        "Oncestream-Subject": subject, "Oncestream-Consumer": consumer,
        "Oncestream-Attempts": "5", "Oncestream-Error": "boom", "Nats-Msg-Id": msg_id,
    }  # fmt: skip
    stored = StoredMessage(
        stream="DLQ", seq=7, subject="DLQ.ORDERS", data=b"x",
        time=datetime.now(UTC), raw_headers=render_block(headers),
    )  # fmt: skip
    return DeadLetter.from_message(stored)


def test_a_consumers_own_letter_is_replayed_for_that_consumer() -> None:
    assert letter_msg_id("ORDERS", "billing", 42) == "dlq:ORDERS:billing:42"
    letter = _letter("dlq:ORDERS:billing:42")
    assert letter.per_consumer
    headers = letter.replay_headers()
    assert headers["Oncestream-Replay-For"] == "billing"
    assert (headers["Oncestream-Replay-Stream"], headers["Oncestream-Replay-Sequence"]) == (
        "ORDERS",
        "42",
    )
    assert headers["Oncestream-Replay-Of"] == "DLQ:7" and headers["Nats-Msg-Id"] == "replay:DLQ:7"
    assert headers["Trace"] == "t-1" and "Oncestream-Consumer" not in headers
    assert replay_target(render_block(headers)) == ("ORDERS", "billing", 42)


def test_an_old_letter_or_a_foreign_id_is_replayed_for_every_consumer() -> None:
    for msg_id in ("dlq:ORDERS:42", "dlq:ORDERS:other:42", "dlq:ORDERS:billing:41", "x"):
        letter = _letter(msg_id)
        assert not letter.per_consumer, msg_id
        headers = letter.replay_headers()
        assert (
            "Oncestream-Replay-For" not in headers and replay_target(render_block(headers)) is None
        )


def test_replay_target_needs_the_consumer_stream_and_sequence() -> None:
    full = {"Oncestream-Replay-For": "c", "Oncestream-Replay-Stream": "S",
            "Oncestream-Replay-Sequence": "9"}  # fmt: skip
    assert replay_target(render_block(full)) == ("S", "c", 9)
    assert replay_target(None) is None and replay_target(b"") is None
    for broken in ({"Oncestream-Replay-Sequence": "x"}, {"Oncestream-Replay-Stream": ""}):
        assert replay_target(render_block({**full, **broken})) is None
    assert replay_entry("S", "c", 9) == LedgerEntry("S.replay.c", 9)


def test_a_partitioned_letter_is_replayed_to_its_published_subject() -> None:
    layout = Partitioning(subjects="t.*", partitions=3)
    stored = layout.stored_subject("t.cli")
    target = _Target.of(_letter("x", subject=stored), layout)
    assert (target.subject, target.stored) == ("t.cli", stored)
    plain = _Target.of(_letter("x", subject="orders.eu"), None)
    assert (plain.subject, plain.stored) == ("orders.eu", "orders.eu")


def test_the_dead_letter_stream_gets_the_replicas_of_the_consumed_stream() -> None:
    config = dead_letter_stream_config("DLQ", "DLQ.ORDERS", {"num_replicas": 3})
    assert (config["num_replicas"], config["subjects"], config["storage"]) == (3, ["DLQ.>"], "file")
    assert dead_letter_stream_config("DLQ", "DLQ.ORDERS", {})["num_replicas"] == 1
    assert dead_letter_stream_config("DLQ", "dead.orders", {})["subjects"] == ["dead.orders"]


def _msg(seq: int, subject: str = "orders.eu") -> Message:
    return Message(subject, f"$JS.ACK.ORDERS.c.1.{seq}.{seq}.0.0", b"", None)


def test_copies_are_claimed_under_their_own_key_beside_the_streams_rows(tmp_path: Path) -> None:
    """A batch with replayed copies: the stream's rows under the prune horizon, the copies'
    keys outside it (the original they replay is pruned), a second copy not fresh."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    ledger.open()
    mine = Registration("ORDERS", "c", (), "", 0)
    ledger.register(mine, lambda others: None)
    tx = ledger.begin()
    tx.claim([LedgerEntry("ORDERS", seq) for seq in range(1, 11)])
    tx.commit()
    assert ledger.prune("ORDERS", 10, consumer="c") == 10  # horizon 1..10 for c
    bound = BoundConsumer(stream="ORDERS", consumer="c", options=ProcessorOptions(), ack_wait=30.0)
    applier = Applier(bound, LedgerCalls(ledger), lambda m, tx: None, ProcessorStats())
    applier._replays = True
    copy = replay_entry("ORDERS", "c", 4)
    entries = [LedgerEntry("ORDERS", 9), copy, LedgerEntry("ORDERS", 12), copy]
    msgs = [_msg(9), _msg(11), _msg(12), _msg(13)]
    tx = ledger.begin()
    assert applier.claim(tx, entries, msgs) == [False, True, True, False]
    tx.commit()
    ledger.prune("ORDERS", 1_000, consumer="c")  # prunes the stream's rows only
    tx = ledger.begin()  # committed: the copy's key is taken for good
    assert applier.claim(tx, [copy], [_msg(14)]) == [False]
    tx.rollback()
    applier._replays = False  # one copy alone (a dropped message's settling) is told apart too
    tx = ledger.begin()
    assert applier.claim(tx, [replay_entry("ORDERS", "c", 5)], [_msg(15)]) == [True]
    tx.rollback()
    ledger.close()
