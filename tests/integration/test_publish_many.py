"""Publisher.publish_many (the Spark sink's bulk path) against a real nats-server."""

from __future__ import annotations

import pytest

from oncestream import ConfigError, StreamMismatch, TooManyInflight
from oncestream.publish import AckTally, Publisher, PublisherOptions

from .test_publisher import assert_exactly_once, read_back


async def test_publish_many_with_backpressure_stores_each_id_once(conn, make_stream) -> None:
    await make_stream("MANY", ("many.>",), allow_batched=False)  # the ack path's seq, duplicate
    ids = [f"m{i}" for i in range(3000)]
    subjects = [f"many.{i % 3}" for i in range(3000)]
    async with Publisher(conn, PublisherOptions(stream="MANY", max_inflight=16)) as pub:
        futures = await pub.publish_many(subjects, [b"x" * 64] * 3000, ids)
        # The same ids again (a re-run Spark task): all duplicates.
        again = await pub.publish_many(subjects[:100], [b"y"] * 100, ids[:100])
        acks = [await f for f in futures]
        dups = [await f for f in again]
    assert [a.seq for a in acks] == list(range(1, 3001))
    assert all(a.stream == "MANY" and not a.duplicate for a in acks)
    assert all(a.duplicate for a in dups)
    stats = pub.stats
    assert (stats.sent, stats.acked, stats.duplicates, stats.failed) == (3100, 3100, 100, 0)
    stored = await read_back(conn, "MANY")
    assert_exactly_once(stored, set(ids))
    assert [(m.subject, m.msg_id) for m in stored[:3]] == [
        ("many.0", "m0"),
        ("many.1", "m1"),
        ("many.2", "m2"),
    ]


async def test_publish_many_carries_expected_stream(conn, make_stream) -> None:
    await make_stream("OWNER", ("owned.>",))
    await make_stream("TARGET", ("target.>",))
    async with Publisher(conn, PublisherOptions(stream="TARGET")) as pub:
        [future] = await pub.publish_many(["owned.x"], [b"1"], ["a"])
        with pytest.raises(StreamMismatch):
            await future
        await pub.flush()


async def test_publish_many_rejects_bad_input_before_sending_it(conn, make_stream) -> None:
    await make_stream("BAD", ("bad.>",))
    async with Publisher(conn, PublisherOptions(stream="BAD")) as pub:
        with pytest.raises(ConfigError, match=r"two.nlines. contains the control"):
            await pub.publish_many(["bad.a", "bad.a"], [b"1", b"2"], ["ok", "two\nlines"])
        with pytest.raises(ConfigError, match="subject"):
            await pub.publish_many(["bad.*"], [b"1"], ["w"])
        with pytest.raises(ConfigError, match="1 subjects, 2 data"):
            await pub.publish_many(["bad.a"], [b"1", b"2"], ["x", "y"])
        await pub.flush()
    assert pub.stats.sent == pub.stats.acked == 1
    assert [m.msg_id for m in await read_back(conn, "BAD")] == ["ok"]


async def test_publish_many_fail_fast_raises_too_many_inflight(conn, make_stream) -> None:
    await make_stream("FFM", ("ffm.>",))
    opts = PublisherOptions(stream="FFM", max_inflight=2, backpressure=False)
    async with Publisher(conn, opts) as pub:
        with pytest.raises(TooManyInflight):
            await pub.publish_many(["ffm.a"] * 3, [b"1", b"2", b"3"], ["1", "2", "3"])
        await pub.flush()
    assert pub.stats.acked == 2


async def test_publish_many_with_a_tally_counts_acks_without_futures(conn, make_stream) -> None:
    await make_stream("TALLY", ("tally.>",), allow_batched=False)  # the ack path's seq, duplicate
    tally = AckTally()
    ids = [f"t{i}" for i in range(500)]
    async with Publisher(conn, PublisherOptions(stream="TALLY", max_inflight=64)) as pub:
        assert await pub.publish_many(["tally.a"] * 500, [b"z"] * 500, ids, tally=tally) == []
        await pub.publish_many(["tally.a"] * 50, [b"z"] * 50, ids[:50], tally=tally)
        await pub.flush()
    assert (tally.stored, tally.duplicates, tally.max_seq) == (500, 50, 500)
    assert tally.streams == {"TALLY"} and tally.errors == []
    assert_exactly_once(await read_back(conn, "TALLY"), set(ids))


async def test_a_tally_failure_is_recorded_and_raised_by_flush(conn, make_stream) -> None:
    await make_stream("OWNER2", ("owned2.>",))
    await make_stream("TARGET2", ("target2.>",))
    tally = AckTally()
    async with Publisher(conn, PublisherOptions(stream="TARGET2")) as pub:
        await pub.publish_many(["target2.a", "owned2.x"], [b"1", b"2"], ["a", "b"], tally=tally)
        with pytest.raises(StreamMismatch):
            await pub.flush()
    assert tally.stored == 1 and len(tally.errors) == 1
    assert isinstance(tally.errors[0], StreamMismatch)
    assert pub.stats.failed == 1
