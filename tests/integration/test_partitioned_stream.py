"""Partitioned streams on a real server: the mapping, producers that keep their subjects,
and changes of layout on a stream that holds messages."""

from __future__ import annotations

import pytest

from oncestream import ConfigError, Connection
from oncestream.publish import ProducerSession, Publisher, PublisherOptions
from oncestream.streams import Partitioning, StreamSpec, ensure_stream, get_message


async def test_the_server_maps_as_partitioning_says(conn: Connection, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("PK", ("pk.*.*",), partitions=8, partition_key=(2,))
    await make_stream("PW", ("pw.>",), partitions=5)
    by_token = Partitioning(subjects="pk.*.*", partitions=8, key=(2,))
    whole = Partitioning(subjects="pw.>", partitions=5)
    published = [f"pk.{r}.k{i}" for i in range(150) for r in ("eu",)] + [
        f"pk.us.k{i}" for i in range(0, 150, 7)
    ]
    async with Publisher(conn, PublisherOptions(stream="PK")) as pub:
        for i, subject in enumerate(published):
            await pub.publish(subject, b"x", msg_id=f"m{i}")
    for seq, subject in enumerate(published, 1):
        stored = (await get_message(conn, "PK", seq=seq)).subject
        assert stored == by_token.stored_subject(subject)
    # The same key in two regions lands in one partition.
    assert by_token.partition_of("pk.eu.k7") == by_token.partition_of("pk.us.k7")
    assert len({by_token.partition_of(s) for s in published}) == 8
    other = [f"pw.a{i}.b" for i in range(60)]
    async with Publisher(conn, PublisherOptions(stream="PW")) as pub:
        for i, subject in enumerate(other):
            await pub.publish(subject, b"y", msg_id=f"w{i}")
    for seq, subject in enumerate(other, 1):
        assert (await get_message(conn, "PW", seq=seq)).subject == whole.stored_subject(subject)
    info = await conn.stream_info("PK")
    assert Partitioning.from_config(info["config"]) == by_token


async def test_a_producer_session_resumes_on_a_partitioned_stream(
    conn: Connection, make_stream
) -> None:  # type: ignore[no-untyped-def]
    """Its resume point is read back from the stored (mapped) subject: before, it read the
    published one, found nothing, and its first publish was refused (wrong last sequence)."""
    await make_stream("PS", ("ps.*.*",), partitions=4, partition_key=(2,))
    session = ProducerSession(conn, stream="PS", subject_prefix="ps.src", producer_id="p1")
    assert await session.start() is None
    for position in range(1, 21):
        await session.publish(position, b"r%d" % position)
    await session.close()
    again = ProducerSession(conn, stream="PS", subject_prefix="ps.src", producer_id="p1")
    assert await again.start() == 20
    for position in range(1, 31):  # the first 20 are skipped
        await again.publish(position, b"r%d" % position)
    await again.close()
    assert again.skipped == 20
    info = await conn.stream_info("PS")
    assert info["state"]["messages"] == 30


async def test_changing_the_layout_of_a_stream_that_holds_messages_is_refused(
    conn: Connection, make_stream
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("PE", ("pe.*",))
    # Empty: partitioned in place.
    await ensure_stream(
        conn, StreamSpec(name="PE", subjects=("pe.*",), partitions=4, partition_key=(1,))
    )
    await conn.nc.jetstream().publish("pe.k1", b"x")
    with pytest.raises(
        ConfigError,
        match=r"holds 1 messages and is 4 partitions of pe\.\* by token 1; refusing to make "
        r"it 8 partitions",
    ):
        await ensure_stream(
            conn, StreamSpec(name="PE", subjects=("pe.*",), partitions=8, partition_key=(1,))
        )
    with pytest.raises(ConfigError, match="refusing to make it not partitioned"):
        await ensure_stream(conn, StreamSpec(name="PE", subjects=("pe.*",)))
    await make_stream("PF", ("pf.*",))
    await conn.nc.jetstream().publish("pf.k1", b"x")
    with pytest.raises(
        ConfigError, match=r"oncestream stream edit PF --partitions 4 --partition-key 1"
    ):
        await ensure_stream(
            conn, StreamSpec(name="PF", subjects=("pf.*",), partitions=4, partition_key=(1,))
        )
    # The same layout again is no change.
    await ensure_stream(
        conn, StreamSpec(name="PE", subjects=("pe.*",), partitions=4, partition_key=(1,))
    )
