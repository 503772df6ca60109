"""Publisher.publish_columns: Arrow columns in, every id stored once, bad rows refused by number.

On the fast-ingest path the frames are built by pyarrow and kept per run
(FastBatch.add_frames); faults on it (a SIGKILLed server) are in
tests/chaos/test_publish_faults.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from oncestream import ConfigError, Connection, MessageTooLarge
from oncestream.publish import AckTally, Publisher, PublisherOptions
from tests.integration.test_publisher import assert_exactly_once, read_back


def _ids(n: int, prefix: str = "c") -> list[str]:
    # Mixed lengths, a '%' (the frame template's own marker) and non-ASCII ids, which take
    # the exact row-by-row check.
    return [f"{prefix}{i}" if i % 7 else f"{prefix}é%d-{i}" for i in range(n)]


@pytest.mark.parametrize("ingest", ["fast", "acks"])
async def test_every_row_is_stored_once_with_its_data(
    conn: Connection, make_stream, ingest: str
) -> None:
    await make_stream("COLS", ("cols.>",), allow_batched=ingest == "fast")
    n = 23_456
    ids = _ids(n)
    datas = [f"payload %b {i}".encode() * (1 + i % 3) for i in range(n)]
    tally = AckTally()
    async with Publisher(conn, PublisherOptions(stream="COLS", ingest=ingest)) as pub:
        assert pub.ingest == ingest
        await pub.publish_columns("cols.x", pa.array(datas), pa.array(ids), tally=tally)
        await pub.flush()
        stats = pub.stats
    assert tally.errors == [] and tally.stored == n and tally.streams == {"COLS"}
    assert tally.max_seq == n
    assert stats.acked == n and stats.failed == 0 and stats.retried == 0
    stored = await read_back(conn, "COLS")
    assert_exactly_once(stored, set(ids))
    by_id = dict(zip(ids, datas, strict=True))
    assert all(m.data == by_id[m.msg_id] and m.subject == "cols.x" for m in stored)


async def test_large_arrow_types_and_large_messages_are_published(
    conn: Connection, make_stream
) -> None:
    """large_string ids, large_binary data (Spark may send them); 200 KiB messages, few a chunk."""
    await make_stream("COLBIG", ("colbig.>",), allow_batched=True)
    n = 300
    ids = [f"big-{i}" for i in range(n)]
    datas = [bytes([i % 256]) * 200_000 for i in range(n)]
    tally = AckTally()
    async with Publisher(conn, PublisherOptions(stream="COLBIG", ingest="fast")) as pub:
        await pub.publish_columns(
            "colbig.x",
            pa.array(datas, pa.large_binary()),
            pa.array(ids, pa.large_string()),
            tally=tally,
        )
        await pub.flush()
        assert pub.inflight == 0
    assert tally.stored == n and tally.errors == []
    stored = await read_back(conn, "COLBIG", batch=20)
    assert_exactly_once(stored, set(ids))
    assert all(m.data == datas[int(m.msg_id.split("-")[1])] for m in stored)  # type: ignore[union-attr]


async def test_columns_sent_again_are_dropped_by_their_ids(conn: Connection, make_stream) -> None:
    await make_stream("COLDUP", ("coldup.>",), allow_batched=True)
    ids = pa.array(_ids(5000))
    datas = pa.array([b"x"] * 5000)
    async with Publisher(conn, PublisherOptions(stream="COLDUP", ingest="fast")) as pub:
        for _ in range(2):
            await pub.publish_columns("coldup.a", datas, ids, tally=AckTally())
            await pub.flush()
    assert_exactly_once(await read_back(conn, "COLDUP"), set(ids.to_pylist()))


async def test_columns_and_single_publishes_share_a_batch(conn: Connection, make_stream) -> None:
    """Runs of frames and Pendings interleave in one batch; each is confirmed once."""
    await make_stream("COLMIX", ("colmix.>",), allow_batched=True)
    tally = AckTally()
    expected: set[str] = set()
    async with Publisher(conn, PublisherOptions(stream="COLMIX", ingest="fast")) as pub:
        futures = []
        for round_ in range(20):
            futures.append(await pub.publish("colmix.one", b"1", msg_id=f"one-{round_}"))
            ids = [f"run{round_}-{i}" for i in range(300)]
            await pub.publish_columns(
                "colmix.run", pa.array([b"r"] * 300), pa.array(ids), tally=tally
            )
            expected.update(ids, {f"one-{round_}"})
        await pub.flush()
    assert all(f.result().stream == "COLMIX" for f in futures)
    assert tally.stored == 6000 and pub.stats.acked == 6020
    assert_exactly_once(await read_back(conn, "COLMIX"), expected)


@pytest.mark.parametrize(
    ("ids", "datas", "error", "match"),
    [
        (["a", "b", "c", " d"], [b"x"] * 4, ConfigError, r"msg_id of row 3 ' d'"),
        (["a", "b\tc"], [b"x"] * 2, ConfigError, r"msg_id of row 1"),
        (["a", "", "c"], [b"x"] * 3, ConfigError, r"msg_id of row 1"),
        (["a", None], [b"x"] * 2, ConfigError, r"msg_ids\[1\] \(row 1\) is null"),
        (["a", "b"], [b"x", None], ConfigError, r"datas\[1\] \(row 1\) is null"),
        (["a", "b"], [b"x"], ConfigError, "2 msg ids"),
        (["a", "big"], [b"x", b"y" * 2_000_000], MessageTooLarge, "'big'.*max_payload"),
    ],
)
async def test_a_bad_row_is_refused_by_number_and_nothing_is_sent(
    conn: Connection, make_stream, ids, datas, error, match
) -> None:
    await make_stream("COLBAD", ("colbad.>",), allow_batched=True)
    async with Publisher(conn, PublisherOptions(stream="COLBAD", ingest="fast")) as pub:
        with pytest.raises(error, match=match):
            await pub.publish_columns(
                "colbad.x",
                pa.array(datas, pa.binary()),
                pa.array(ids, pa.string()),
                tally=AckTally(),
            )
        await pub.flush()
        assert pub.stats.sent == 0
    assert (await conn.stream_info("COLBAD"))["state"]["messages"] == 0


async def test_an_invalid_subject_is_refused(conn: Connection, make_stream) -> None:
    await make_stream("COLSUB", ("colsub.>",), allow_batched=True)
    async with Publisher(conn, PublisherOptions(stream="COLSUB")) as pub:
        with pytest.raises(ConfigError, match=r"colsub\.a b"):
            await pub.publish_columns(
                "colsub.a b", pa.array([b"x"]), pa.array(["i"]), tally=AckTally()
            )
