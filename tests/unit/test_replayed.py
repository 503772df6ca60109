"""Dead letters per consumer and their replayed copies: the headers, the ledger key a copy
is claimed under (on a real SQLite ledger, no server), the replay's target subject on a
partitioned stream, and the dead-letter stream's config."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncestream import ConfigError, SQLiteLedger
from oncestream._headers import render_block
from oncestream._message import Message
from oncestream.cli import app
from oncestream.cli._dlq import letter_row
from oncestream.ledger import LedgerEntry, Registration
from oncestream.process import list_dead_letters, replay_dead_letters
from oncestream.process._applying import Applier
from oncestream.process._bound import BoundConsumer
from oncestream.process._deadletter import dead_letter_headers
from oncestream.process._ledgercalls import LedgerCalls
from oncestream.process._options import ProcessorOptions, ProcessorStats
from oncestream.process._replay import DeadLetter, _Target, failed_at, letter_identity
from oncestream.process._replayed import letter_msg_id, replay_entry, replay_target
from oncestream.process._setup import dead_letter_stream_config
from oncestream.streams import Partitioning, StoredMessage

CREATED = "2026-11-29T10:00:00.5Z"


def _letter(
    msg_id: str, consumer: str = "billing", subject: str = "orders.eu", created: str = ""
) -> DeadLetter:
    headers = {
        "Trace": "t-1", "Oncestream-Stream": "ORDERS", "Oncestream-Sequence": "42",
        "Oncestream-Subject": subject, "Oncestream-Consumer": consumer,
        "Oncestream-Attempts": "5", "Oncestream-Error": "boom", "Nats-Msg-Id": msg_id,
        **({"Oncestream-Stream-Created": created} if created else {}),
    }  # fmt: skip
    stored = StoredMessage(
        stream="DLQ", seq=7, subject="DLQ.ORDERS", data=b"x",
        time=datetime.now(UTC), raw_headers=render_block(headers),
    )  # fmt: skip
    return DeadLetter.from_message(stored)


def test_a_consumers_own_letter_is_replayed_for_that_consumer() -> None:
    assert letter_msg_id("ORDERS", "billing", 42) == "dlq:ORDERS:billing:42"
    assert (
        letter_msg_id("ORDERS", "billing", 42, CREATED) == "dlq:ORDERS:billing:42:202611291000005"
    )
    letter = _letter(letter_msg_id("ORDERS", "billing", 42, CREATED), created=CREATED)
    assert letter.per_consumer and letter.stream_created == CREATED
    headers = letter.replay_headers()
    assert headers["Oncestream-Replay-For"] == "billing"
    assert (headers["Oncestream-Replay-Stream"], headers["Oncestream-Replay-Sequence"]) == (
        "ORDERS",
        "42",
    )
    assert headers["Oncestream-Replay-Of"] == "DLQ:7" and headers["Nats-Msg-Id"] == "replay:DLQ:7"
    assert headers["Trace"] == "t-1" and "Oncestream-Consumer" not in headers
    assert headers["Oncestream-Replay-Stream-Created"] == CREATED
    target = replay_target(render_block(headers))
    assert target == ("ORDERS", "billing", 42, CREATED)
    assert target is not None and replay_entry(*target) == LedgerEntry(
        "ORDERS.replay.billing.202611291000005", 42
    )
    # A letter of a message the consumer's earlier copy replayed (its msg id names the
    # copy's sequence) and one written before letters named the stream's life.
    for msg_id in ("dlq:ORDERS:billing:57:202611291000005", "dlq:ORDERS:billing:42"):
        assert _letter(msg_id).per_consumer, msg_id


def test_a_letter_names_the_message_whose_failure_wrote_it_when_its_id_names_a_life() -> None:
    """``failed_at``: what ``dlq replay`` compares a later copy against; without a life
    (or with a foreign id) it is None and the letter is replayed as before."""
    life = "202611291000005"
    assert failed_at(_letter(f"dlq:ORDERS:billing:57:{life}", created=CREATED)) == (57, life)
    for msg_id in ("dlq:ORDERS:billing:42", "dlq:ORDERS:42", "dlq:ORDERS:billing:x:1", "x",
                   f"dlq:ORDERS:other:42:{life}", f"dlq:ORDERS:billing:42:{life}:9"):  # fmt: skip
        assert failed_at(_letter(msg_id, created=CREATED)) is None, msg_id
    assert letter_identity(_letter("dlq:ORDERS:billing:42")) == ("ORDERS", "billing", 42, "")


def test_an_old_letter_or_a_foreign_id_is_replayed_for_every_consumer() -> None:
    for msg_id in ("dlq:ORDERS:42", "dlq:ORDERS:other:42", "dlq:ORDERS:billing", "x"):
        letter = _letter(msg_id)
        assert not letter.per_consumer, msg_id
        headers = letter.replay_headers()
        assert (
            "Oncestream-Replay-For" not in headers and replay_target(render_block(headers)) is None
        )


def test_replay_target_needs_the_consumer_stream_and_sequence() -> None:
    full = {"Oncestream-Replay-For": "c", "Oncestream-Replay-Stream": "S",
            "Oncestream-Replay-Sequence": "9"}  # fmt: skip
    assert replay_target(render_block(full)) == ("S", "c", 9, "")
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


def test_a_copy_that_fails_again_is_dead_lettered_as_the_message_it_replays() -> None:
    """Its letter names the original's stream, sequence, life and msg id (so its replay is
    claimed under the first copy's key), not the copy's; the copy's Oncestream-Replay-*
    headers are not carried over. Its msg id names the copy: not the first letter's."""
    first = _letter(letter_msg_id("ORDERS", "billing", 42, CREATED), created=CREATED)
    copy_headers = {**first.replay_headers(), "Oncestream-Msg-Id": "order-41"}
    copy = Message(
        "orders.eu", "$JS.ACK.ORDERS.billing.1.57.3.0.0", b"x", None,
        raw_headers=render_block(copy_headers),
    )  # fmt: skip
    now = "2026-11-30T08:00:00Z"  # the copy sits in the stream created again since
    headers = dead_letter_headers(
        copy, stream="ORDERS", consumer="billing", seq=57, attempts=1, error="boom", created=now
    )
    assert (headers["Oncestream-Stream"], headers["Oncestream-Sequence"]) == ("ORDERS", "42")
    assert headers["Oncestream-Stream-Created"] == CREATED
    assert headers["Oncestream-Msg-Id"] == "order-41" and headers["Trace"] == "t-1"
    assert headers["Nats-Msg-Id"] == letter_msg_id("ORDERS", "billing", 57, now)
    assert not [name for name in headers if name.startswith("Oncestream-Replay-")]
    second = DeadLetter.from_message(
        StoredMessage(
            stream="DLQ", seq=8, subject="DLQ.ORDERS", data=b"x", time=datetime.now(UTC),
            raw_headers=render_block(headers),
        )
    )  # fmt: skip
    again = replay_target(render_block(second.replay_headers()))
    assert again is not None and replay_entry(*again) == replay_entry(
        "ORDERS", "billing", 42, CREATED
    )
    # Another consumer's copy is never dead-lettered by this one; a plain message is itself.
    plain = Message("orders.eu", "", b"x", None, raw_headers=render_block({"Nats-Msg-Id": "o-1"}))
    headers = dead_letter_headers(
        plain, stream="ORDERS", consumer="billing", seq=3, attempts=1, error="e", created=now
    )
    assert (headers["Oncestream-Sequence"], headers["Oncestream-Msg-Id"]) == ("3", "o-1")


def test_the_python_api_refuses_a_consumer_name_the_cli_refuses() -> None:
    """Before, ``consumer=""`` listed (and replayed) every letter, ``"a*"`` none, silently."""
    for value in ("", "a*", "a.b", "a b"):
        for call in (list_dead_letters, replay_dead_letters):
            with pytest.raises(ConfigError, match=r"consumer: .* is not a valid consumer name"):
                asyncio.run(call(None, "DLQ", consumer=value))  # type: ignore[operator]


def test_dlq_ls_says_who_applies_a_letters_copy_and_replay_help_says_it_true() -> None:
    own = letter_row(_letter(letter_msg_id("ORDERS", "billing", 42, CREATED), created=CREATED))
    old = letter_row(_letter("dlq:ORDERS:42"))
    assert (own["copy_for"], old["copy_for"]) == ("billing", "all (old letter)")
    result = CliRunner().invoke(app, ["dlq", "replay", "--help"], env={"COLUMNS": "200"})
    said = " ".join(result.stdout.replace("│", " ").split())
    assert "applied by that consumer only" in said
    assert "before letters were per consumer (copy_for: all) is applied by every consumer" in said
    assert "--as-consumer" not in said and "Publish the message again if it must" in said
