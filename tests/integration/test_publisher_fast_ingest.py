"""The Publisher's fast-ingest path (ADR-50 batches) against a real nats-server 2.14+.

Faults on this path (a paused and a SIGKILLed server) run in
tests/chaos/test_publish_faults.py, parametrized over both ingest paths.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from oncestream import ConfigError, Connection, StreamMismatch
from oncestream.publish import AckTally, Publisher, PublisherOptions
from oncestream.streams import update_stream
from tests.integration.test_publisher import assert_exactly_once, read_back


async def test_auto_picks_batches_only_where_the_stream_allows_them(conn, make_stream) -> None:
    await make_stream("FIYES", ("fiyes.>",), allow_batched=True)
    await make_stream("FINO", ("fino.>",), allow_batched=False)
    async with Publisher(conn, PublisherOptions(stream="FIYES")) as pub:
        assert pub.ingest == "fast"
        ack = await (await pub.publish("fiyes.a", b"x", msg_id="a1"))
    # The server confirms a range: no sequence per message, the batch instead.
    assert ack.stream == "FIYES" and ack.seq == 0 and ack.batch
    async with Publisher(conn, PublisherOptions(stream="FINO")) as pub:
        assert pub.ingest == "acks"
        ack = await (await pub.publish("fino.a", b"x", msg_id="a1"))
    assert ack.seq == 1 and ack.batch is None
    async with Publisher(conn, PublisherOptions(stream="FIYES", ingest="acks")) as pub:
        assert pub.ingest == "acks"
    async with Publisher(conn, PublisherOptions()) as pub:  # no stream: nothing to check
        assert pub.ingest == "acks"


async def test_fast_is_refused_with_the_reason_when_the_stream_does_not_allow_it(
    conn, make_stream
) -> None:
    await make_stream("FIREF", ("firef.>",), allow_batched=False)
    pub = Publisher(conn, PublisherOptions(stream="FIREF", ingest="fast"))
    with pytest.raises(ConfigError, match=r"FIREF.*allow_batched.*stream edit FIREF"):
        await pub.start()
    with pytest.raises(ConfigError, match="ingest must be 'auto', 'fast' or 'acks', got 'quick'"):
        PublisherOptions(ingest="quick")  # type: ignore[arg-type]


async def test_every_id_stored_once_and_repeats_are_dropped(conn, make_stream) -> None:
    await make_stream("FIDUP", ("fidup.>",), allow_batched=True)
    ids = [f"d{i}" for i in range(5000)]
    opts = PublisherOptions(stream="FIDUP", ingest="fast")
    async with Publisher(conn, opts) as pub:
        for msg_id in ids:
            await pub.publish(f"fidup.{len(msg_id) % 3}", msg_id.encode(), msg_id=msg_id)
        await pub.flush()
        # The same ids again, in a new batch: the duplicate window drops each one.
        for msg_id in ids[:2000]:
            await pub.publish("fidup.0", b"again", msg_id=msg_id)
    assert pub.stats.acked == 7000 and pub.stats.failed == 0 and pub.stats.retried == 0
    assert_exactly_once(await read_back(conn, "FIDUP"), set(ids))


async def test_publish_many_with_a_tally_counts_and_learns_the_last_sequence(
    conn, make_stream
) -> None:
    await make_stream("FIMANY", ("fimany.>",), allow_batched=True)
    n = 12_345
    tally = AckTally()
    async with Publisher(conn, PublisherOptions(stream="FIMANY", ingest="fast")) as pub:
        await pub.publish_many(
            ["fimany.x"] * n, [b"y" * 64] * n, [f"m{i}" for i in range(n)], tally=tally
        )
        await pub.flush()
    assert tally.errors == [] and tally.stored == n and tally.streams == {"FIMANY"}
    assert tally.max_seq == n  # the batch's PubAck names the last stored sequence
    assert len(await read_back(conn, "FIMANY")) == n


async def test_a_lone_publish_is_confirmed_without_waiting_for_more(conn, make_stream) -> None:
    await make_stream("FILONE", ("filone.>",), allow_batched=True)
    async with Publisher(conn, PublisherOptions(stream="FILONE", ingest="fast")) as pub:
        for i in range(3):  # the batch ends once the publisher is idle: each one is acked
            ack = await asyncio.wait_for(await pub.publish("filone.x", b"1", msg_id=f"l{i}"), 5)
            assert ack.batch
    assert len(await read_back(conn, "FILONE")) == 3


@pytest.mark.parametrize("other_batched", [True, False])
async def test_a_subject_of_another_stream_fails_typed_and_stores_nothing_there(
    conn, make_stream, other_batched: bool
) -> None:
    # Only a batch's first message carries Nats-Expected-Stream: a later one that
    # reaches another stream is refused there as part of a batch that stream never saw
    # (or as a batch at all, when it does not allow them), and the re-send carries it.
    await make_stream("FIMINE", ("fimine.>",), allow_batched=True)
    await make_stream("FIOTHER", ("fiother.>",), allow_batched=other_batched)
    opts = PublisherOptions(stream="FIMINE", ingest="fast")
    async with Publisher(conn, opts) as pub:
        first = await pub.publish("fiother.x", b"wrong", msg_id="o0")  # opens the batch
        good = [await pub.publish("fimine.x", b"ok", msg_id=f"g{i}") for i in range(50)]
        middle = await pub.publish("fiother.x", b"wrong", msg_id="o1")  # mid-batch
        good += [await pub.publish("fimine.x", b"ok", msg_id=f"g{i}") for i in range(50, 100)]
        for future in (first, middle):
            with pytest.raises(StreamMismatch):
                await future
        await asyncio.gather(*good)
        await pub.flush()  # both failures were retrieved above: nothing left to raise
        # One stray message does not turn batches off for the rest.
        assert pub.ingest == "fast"
    info = await conn.stream_info("FIOTHER")
    assert info["state"]["messages"] == 0
    assert_exactly_once(await read_back(conn, "FIMINE"), {f"g{i}" for i in range(100)})


@pytest.mark.parametrize("other_batched", [True, False])
async def test_a_stray_subject_after_the_batch_went_bare_is_refused_and_re_sent_typed(
    conn, make_stream, other_batched: bool
) -> None:
    # Past its first flow ack a batch's messages leave Nats-Expected-Stream out; one of
    # them on another stream's subject must still store nothing there.
    await make_stream("FIBARE", ("fibare.>",), allow_batched=True)
    await make_stream("FISTRAY", ("fistray.>",), allow_batched=other_batched)
    n, stray = 9000, 7000
    subjects = ["fibare.x"] * n
    subjects[stray] = "fistray.x"
    ids = [f"b{i}" for i in range(n)]
    async with Publisher(conn, PublisherOptions(stream="FIBARE", ingest="fast")) as pub:
        futures = await pub.publish_many(subjects, [b"z"] * n, ids)
        with pytest.raises(StreamMismatch):
            await futures[stray]
        await asyncio.gather(*futures[:stray], *futures[stray + 1 :])
        await pub.flush()
        assert pub.ingest == "fast"
    assert (await conn.stream_info("FISTRAY"))["state"]["messages"] == 0
    stored = await read_back(conn, "FIBARE")
    assert_exactly_once(stored, set(ids) - {ids[stray]})
    # The first message of the batch carried the header, the late ones did not.
    assert stored[0].headers.get("Nats-Expected-Stream") == "FIBARE"
    assert "Nats-Expected-Stream" not in stored[-1].headers


async def test_per_message_expectations_take_the_ack_path_and_return_the_sequence(
    conn, make_stream
) -> None:
    await make_stream("FIEXP", ("fiexp.>",), allow_batched=True)
    async with Publisher(conn, PublisherOptions(stream="FIEXP", ingest="fast")) as pub:
        first = await (await pub.publish("fiexp.a", b"1", msg_id="e1"))
        ack = await (await pub.publish("fiexp.a", b"2", msg_id="e2", expected_last_subject_seq=1))
    assert first.batch and ack.batch is None and ack.seq == 2


async def test_batches_turned_off_mid_run_fall_back_to_acks_without_loss(
    conn, make_stream, caplog
) -> None:
    info = await make_stream("FIOFF", ("fioff.>",), allow_batched=True)
    ids = [f"f{i}" for i in range(3000)]
    async with Publisher(conn, PublisherOptions(stream="FIOFF", ingest="auto")) as pub:
        assert pub.ingest == "fast"
        for msg_id in ids[:1000]:
            await pub.publish("fioff.x", b"a", msg_id=msg_id)
        await pub.flush()
        await update_stream(conn, {**info["config"], "allow_batched": False})
        with caplog.at_level(logging.WARNING, logger="oncestream.publish"):
            for msg_id in ids[1000:]:
                await pub.publish("fioff.x", b"b", msg_id=msg_id)
            await pub.flush()
        assert pub.ingest == "acks"
    assert "fast-ingest batches refused" in caplog.text and "10205" in caplog.text
    assert pub.stats.failed == 0 and pub.stats.acked == 3000
    assert_exactly_once(await read_back(conn, "FIOFF"), set(ids))


async def test_the_reply_path_is_chosen_at_start_and_logged_once(
    conn: Connection, make_stream, caplog
) -> None:
    await make_stream("FILOG", ("filog.>",), allow_batched=True)
    with caplog.at_level(logging.INFO, logger="oncestream.publish"):
        for _ in range(3):
            async with Publisher(conn, PublisherOptions(stream="FILOG")):
                pass
    lines = [r.message for r in caplog.records if "FILOG" in r.message]
    assert lines == ["publisher to stream 'FILOG': fast-ingest batches (stream 'FILOG' allows "
                     "batched publishing)"]  # fmt: skip
