"""A ProducerSession whose subject receives a dead letter's replayed copy, against a real server.

Found by the fault campaign: ``oncestream dlq replay`` republishes a dead letter on
its original subject, here a ProducerSession's own. The running session's next
publish then failed with ``WrongLastSequence`` ("another producer with the same id
is writing"), and every restart with ``ConfigError`` (the subject's last message,
the copy, has no ``Oncestream-Source-Pos``): the producer was broken for good.

A copy carries ``Oncestream-Replay-Of``; the session takes it for what it is, not
a record of its own: :meth:`start` reads back past copies to its last record, and
a publish refused because copies followed its previous message goes after them.
A message without that header (a second producer with the same id) still fails
the session as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness import publish_n
from oncestream import (
    ConfigError,
    Connection,
    ConnectOptions,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    WrongLastSequence,
)
from oncestream.process import replay_dead_letters
from oncestream.publish import ProducerSession, Publisher, PublisherOptions
from oncestream.publish._session import PRODUCER_HEADER, SOURCE_POS_HEADER
from tests.handlers import record_unless_7
from tests.integration.test_publisher import StoredMsg, read_back

STREAM, DLQ, SUBJECT = "T", "T_DLQ", "t.sess"
FAST = PublisherOptions(ack_timeout=0.5, max_attempts=2, retry_backoff=(0.1,))


def _session(conn: Connection, batch_size: int = 1) -> ProducerSession:
    return ProducerSession(
        conn, stream=STREAM, subject_prefix="t", producer_id="sess", options=FAST,
        batch_size=batch_size,
    )  # fmt: skip


def _positions(first: int, last: int) -> list[tuple[int, bytes]]:
    return [(p, b"%d" % p) for p in range(first, last + 1)]


async def _dead_letter_and_replay(url: str, conn: Connection, tmp_path: Path, letters: int) -> None:
    """A Processor of the stream fails every multiple of 7 (dead-lettered at once); the
    dead letters are then replayed, as ``oncestream dlq replay DLQ --all`` does."""
    opts = ProcessorOptions(batch=50, max_deliver=1, backoff=(0.1,), dead_letter_stream=DLQ)
    processor = Processor(
        ConnectOptions(servers=(url,)), STREAM, "proc", record_unless_7,
        ledger=SQLiteLedger(tmp_path / "proc.db"), options=opts,
    )  # fmt: skip
    task = asyncio.create_task(processor.run())
    try:
        await processor.wait_until(lambda s: s.dead_lettered >= letters, 30)
    finally:
        await processor.stop()
        await task
    report = await replay_dead_letters(conn, DLQ)
    assert len(report.replayed) == letters


def _records_and_copies(
    stored: list[StoredMsg], subject: str = SUBJECT
) -> tuple[list[int], list[bytes]]:
    """The session's positions on its subject, in order, and the copies' payloads."""
    on_subject = [m for m in stored if m.subject == subject]
    copies = [m.data for m in on_subject if "Oncestream-Replay-Of" in m.headers]
    records = [
        int(m.headers[SOURCE_POS_HEADER]) for m in on_subject if SOURCE_POS_HEADER in m.headers
    ]
    assert len(records) + len(copies) == len(on_subject)  # nothing else on the subject
    return records, copies


@pytest.mark.parametrize("batch_size", [1, 4], ids=["single", "atomic-batches"])
async def test_a_copy_replayed_mid_run_does_not_stop_the_session(
    nats_server, conn: Connection, make_stream, tmp_path: Path, batch_size: int
) -> None:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("t.>",), allow_atomic=True)
    session = _session(conn, batch_size)
    assert await session.start() is None
    assert await session.run(_positions(1, 10)) == 10
    await _dead_letter_and_replay(nats_server.url, conn, tmp_path, letters=1)  # 7's copy: seq 11

    # The running session goes on after the copy (before: WrongLastSequence, 10071).
    assert await session.run(_positions(11, 20)) == 10
    assert session.position == 20
    await session.close()
    # ... and a restart resumes after its last record.
    again = _session(conn, batch_size)
    assert await again.start() == 20
    assert await again.run(_positions(1, 22)) == 2
    await again.close()

    records, copies = _records_and_copies(await read_back(conn, STREAM))
    assert records == list(range(1, 23))  # every position once, in order
    assert copies == [b"7"]


async def test_a_session_restarted_after_replayed_copies_resumes_after_its_last_record(
    nats_server, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("t.>",))
    first = _session(conn)
    assert await first.start() is None
    assert await first.run(_positions(1, 14)) == 14  # seqs 1..14
    await first.close()
    # Another subject's messages between the session's last record and the copies: the
    # read back past the copies searches the subject, not the stream, message by message.
    await publish_n(conn, "t.other", 10, data=lambda i: b"%d" % (7 * i + 1))  # seqs 15..24
    await _dead_letter_and_replay(nats_server.url, conn, tmp_path, letters=2)  # seqs 25, 26

    # Before: ConfigError (the last message on 't.sess' has no Oncestream-Source-Pos).
    second = _session(conn)
    assert await second.start() == 14
    assert second.last_seq == 26  # the next record goes after the last copy
    assert await second.run(_positions(1, 20)) == 6
    await second.close()

    records, copies = _records_and_copies(await read_back(conn, STREAM))
    assert records == list(range(1, 21))
    assert copies == [b"7", b"14"]


async def _copy(conn: Connection, seq: int) -> None:
    """A dead letter's copy as ``dlq replay`` stores it: Oncestream-Replay-Of, no position."""
    async with Publisher(conn, FAST) as pub:
        headers = {"Oncestream-Replay-Of": f"{DLQ}:{seq}", "Oncestream-Msg-Id": f"sess:{seq}"}
        await (await pub.publish(SUBJECT, b"copy", msg_id=f"replay:{DLQ}:{seq}", headers=headers))


async def _rival(conn: Connection) -> None:
    """A second producer with the same id: a plain publish on the subject."""
    async with Publisher(conn, FAST) as pub:
        await (await pub.publish(SUBJECT, b"rival", msg_id="rival"))


@pytest.mark.parametrize(
    "writes",
    [("rival",), ("copy", "rival"), ("rival", "copy")],
    ids=["rival", "copy-then-rival", "rival-then-copy"],
)
async def test_a_rival_producer_still_fails_the_session(
    conn: Connection, make_stream, writes: tuple[str, ...]
) -> None:
    await make_stream(STREAM, ("t.>",))
    session = _session(conn)
    assert await session.start() is None
    await session.run(_positions(1, 3))
    for number, write in enumerate(writes, start=1):
        await (_copy(conn, number) if write == "copy" else _rival(conn))

    with pytest.raises(WrongLastSequence) as info:
        await session.publish(4, b"4")
    assert info.value.err_code == 10071
    assert "another producer with the same id is writing" in str(info.value)
    await session.close()
    # A restart does not take the rival's message for a record of its own either.
    restarted = _session(conn)
    with pytest.raises(ConfigError, match="no integer Oncestream-Source-Pos header"):
        await restarted.start()
    await restarted.close()


async def test_a_resend_of_a_stored_record_is_recognised_behind_a_copy(
    conn: Connection, make_stream
) -> None:
    """An earlier attempt was stored (ack lost), then a copy was replayed behind it: the
    re-send is a duplicate of the record before the copy, not a rival's write."""
    await make_stream(STREAM, ("t.>",))
    session = _session(conn)
    assert await session.start() is None
    await session.run(_positions(1, 2))
    async with Publisher(conn, FAST) as raw:  # what the lost attempt of position 3 stored
        stored = await (
            await raw.publish(
                SUBJECT, b"3", msg_id=session.msg_id(3),
                headers={SOURCE_POS_HEADER: "3", PRODUCER_HEADER: "sess"},
                expected_last_subject_seq=session.last_seq,
            )
        )  # fmt: skip
    await _copy(conn, 1)

    ack = await session.publish(3, b"3")
    assert ack is not None and ack.duplicate and ack.seq == stored.seq
    assert await session.run(_positions(4, 5)) == 2
    await session.close()
    records, copies = _records_and_copies(await read_back(conn, STREAM))
    assert (records, copies) == ([1, 2, 3, 4, 5], [b"copy"])


async def test_copies_on_a_partitioned_stream_are_read_back_under_the_stored_subject(
    conn: Connection, make_stream
) -> None:
    """The session's records and the copies are stored under ``<partition>.t.sess``."""
    await make_stream(STREAM, ("t.*",), partitions=4, partition_key=(1,))
    session = _session(conn)
    assert await session.start() is None
    await session.run(_positions(1, 5))
    await _copy(conn, 1)
    assert await session.run(_positions(6, 8)) == 3
    await session.close()
    await publish_n(conn, "t.other", 5)
    await _copy(conn, 2)
    again = _session(conn)
    assert await again.start() == 8
    assert await again.run(_positions(1, 10)) == 2
    await again.close()

    stored = [m for m in await read_back(conn, STREAM) if m.subject.endswith(f".{SUBJECT}")]
    assert len({m.subject for m in stored}) == 1  # one partition
    records, copies = _records_and_copies(stored, subject=stored[0].subject)
    assert (records, copies) == (list(range(1, 11)), [b"copy", b"copy"])


@pytest.mark.parametrize("batch_size", [1, 4], ids=["single", "atomic-batches"])
@pytest.mark.parametrize("name", ["Oncestream-Replay-Of", "oncestream-replay-for"])
async def test_a_record_may_not_carry_a_replay_header(
    conn: Connection, make_stream, batch_size: int, name: str
) -> None:
    """A record carrying Oncestream-Replay-Of would be read back as a copy: a restart
    resumed before it and, past the duplicate window, stored its positions again."""
    await make_stream(STREAM, ("t.>",), allow_atomic=True)
    session = _session(conn, batch_size)
    assert await session.start() is None
    with pytest.raises(ConfigError, match=f"header '{name}' is not accepted.*dead letter's copy"):
        await session.publish(1, b"1", headers={name: "upstream:1"})
    assert await read_back(conn, STREAM) == []  # refused before anything was sent
    # The session carries on; other headers are fine.
    assert await session.run(_positions(1, 3)) == 3
    await session.publish(4, b"4", headers={"Oncestream-Replayed": "no"})
    await session.close()
    again = _session(conn, batch_size)
    assert await again.start() == 4
    await again.close()


@pytest.mark.parametrize("removed_by", ["max_msgs_per_subject", "purge"])
async def test_copies_without_a_record_behind_them_fail_start(
    conn: Connection, make_stream, removed_by: str
) -> None:
    """Copies evicted the session's records: start() found no record and returned None,
    and the input was published again from position 1."""
    limits = {"max_msgs_per_subject": 1} if removed_by == "max_msgs_per_subject" else {}
    await make_stream(STREAM, ("t.>",), **limits)
    session = _session(conn)
    assert await session.start() is None
    assert await session.run(_positions(1, 5)) == 5
    await session.close()
    if removed_by == "purge":
        await conn.api(f"STREAM.PURGE.{STREAM}", {"filter": SUBJECT})
    await _copy(conn, 1)  # with max_msgs_per_subject=1 it replaces position 5

    restarted = _session(conn)
    with pytest.raises(ConfigError, match=r"holds replayed copies.*but no record of this session"):
        await restarted.start()
    with pytest.raises(ConfigError, match=r"call ProducerSession\.start"):
        await restarted.publish(1, b"1")
    await restarted.close()
    records, copies = _records_and_copies(await read_back(conn, STREAM))
    assert copies == [b"copy"]
    assert records == []  # nothing published again (nor position 5 kept, with the limit)


@pytest.mark.parametrize("batch_size", [1, 2], ids=["single", "atomic-batches"])
async def test_copies_racing_every_resend_give_up_after_8_resends(
    conn: Connection, make_stream, batch_size: int
) -> None:
    """A copy lands right before every send of one record (or batch): both modes re-send
    8 times after copies, then fail saying so, with the sequence the last send expected."""
    await make_stream(STREAM, ("t.>",), allow_atomic=True)
    session = _session(conn, batch_size)
    assert await session.start() is None
    await session.run(_positions(1, 2))
    racing_copies = 0
    limit = 0
    if batch_size == 1:
        owner, attr = session._log.publisher, "publish"
    else:
        owner, attr = session._batcher, "send"
    send = getattr(owner, attr)

    async def racing(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal racing_copies
        if racing_copies < limit:
            racing_copies += 1
            await _copy(conn, 1000 + racing_copies)
        return await send(*args, **kwargs)

    setattr(owner, attr, racing)
    limit = 8  # 1 refused send + 8 re-sends after copies: the 9th send is stored
    assert await session.run(_positions(3, 4)) == 2
    assert racing_copies == 8

    limit = 8 + 9  # every send of the next record is refused
    with pytest.raises(WrongLastSequence) as info:
        await session.run(_positions(5, 6))
    assert racing_copies == 8 + 9  # the first send and 8 re-sends
    setattr(owner, attr, send)
    last = (await conn.stream_info(STREAM))["state"]["last_seq"]
    text = str(info.value)
    assert "copies of dead letters (Oncestream-Replay-Of) kept arriving" in text
    assert "after 8 re-sends after replayed copies" in text
    assert f"at seq {last - 1}," in text  # the last send expected the copy before the last
    assert "another producer" not in text
    await session.close()

    again = _session(conn, batch_size)
    assert await again.start() == 4
    assert await again.run(_positions(1, 6)) == 2
    await again.close()
    records, copies = _records_and_copies(await read_back(conn, STREAM))
    assert records == list(range(1, 7))
    assert len(copies) == 17
