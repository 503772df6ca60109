"""Kafka's source options under their Kafka names, through local Spark and a real nats-server.

One test (or two) per row of the "works as in Kafka" table of docs/from-kafka.md
(issue 23, item 5), asserting Kafka's behaviour: rows per micro-batch, triggers
skipped until a minimum or a delay, batch reads bounded by time, Kafka's JSON
offsets. Waits are bounded and wait on events (query progress), not on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from tests.spark._helpers import publish, source_options

pytestmark = pytest.mark.timeout(180)

WAIT = 60.0  # the bound of every wait for a query event


def _read(spark: Any, url: str, stream: str, **extra: Any) -> Any:
    return spark.read.format("jetstream").options(**source_options(url, stream, **extra)).load()


def _sequences(df: Any) -> list[int]:
    return sorted(r.sequence for r in df.select("sequence").collect())


def _stream(spark: Any, url: str, stream: str, **extra: Any) -> Any:
    return (
        spark.readStream.format("jetstream").options(**source_options(url, stream, **extra)).load()
    )


def _available_now(spark: Any, df: Any, name: str) -> tuple[Any, list[int]]:
    """Run ``df`` with Trigger.AvailableNow into a memory table; the query and the sequences."""
    query = (
        df.select("sequence")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(WAIT * 2)
        assert not query.isActive, "the AvailableNow query did not finish"
        if query.exception() is not None:
            raise query.exception()
        return query, _sequences(spark.table(name))
    finally:
        query.stop()
        spark.catalog.dropTempView(name)


def _batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def _time_ms(reply: dict[str, Any]) -> int:
    """The stored time of a ``STREAM.MSG.GET`` reply in whole milliseconds (rounded down)."""
    whole, _, fraction = reply["message"]["time"].rstrip("Z").partition(".")
    seconds = int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
    return seconds * 1000 + int((fraction + "000")[:3])


async def _time_after(conn: Connection, stream: str, seq: int) -> int:
    """A time in epoch ms after message ``seq`` was stored and before anything published next."""
    millis = _time_ms(await conn.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})) + 1
    deadline = time.monotonic() + 1.0
    while time.time() * 1000 <= millis:  # the clock passes it within a millisecond
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)
    return millis


def _refused_by_streaming(df: Any) -> None:
    """The query fails at its start: an ending option is for batch reads only, as in Kafka."""
    with pytest.raises(Exception, match=r"apply to batch reads \(spark\.read\) only"):
        query = df.writeStream.format("noop").start()
        try:
            query.awaitTermination(WAIT)
        finally:
            query.stop()


# --------------------------------------------------------------------------- offsets JSON


async def test_offsets_json_per_partition(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """Kafka's ``{"topic": {"partition": offset}}``: a stream is the one partition "0"."""
    url = nats_server.url
    await make_stream("KJ", ("kj.>",))
    await publish(conn, "kj.x", 20)
    # As in Kafka: the starting offset is inclusive, the ending one exclusive.
    df = _read(
        spark, url, "KJ", startingOffsets='{"KJ": {"0": 5}}', endingOffsets='{"KJ": {"0": 9}}'
    )
    assert _sequences(df) == [5, 6, 7, 8]
    # -2 is earliest, -1 latest.
    df = _read(
        spark, url, "KJ", startingOffsets='{"KJ": {"0": -2}}', endingOffsets='{"KJ": {"0": -1}}'
    )
    assert _sequences(df) == list(range(1, 21))
    # Streaming: the same JSON starts the query.
    _, got = _available_now(
        spark, _stream(spark, url, "KJ", startingOffsets='{"KJ": {"0": 15}}'), "kafka_json"
    )
    assert got == list(range(15, 21))
    # A stream has no partition "1".
    with pytest.raises(Exception, match=r"stream 'KJ' is one ordered log.*got partitions '0', '1'"):
        _read(spark, url, "KJ", startingOffsets='{"KJ": {"0": 1, "1": 1}}').collect()
    # As in Kafka, ending offsets are for batch reads only.
    _refused_by_streaming(_stream(spark, url, "KJ", endingOffsets='{"KJ": {"0": 9}}'))


# --------------------------------------------------------------------------- timestamps


async def test_timestamps_bound_a_batch_read(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """Reads start at the first message at or after ``startingTimestamp``, end before
    the first one at or after ``endingTimestamp``."""
    url = nats_server.url
    await make_stream("KT", ("kt.>",))
    await publish(conn, "kt.x", 5)
    t1 = await _time_after(conn, "KT", 5)
    await publish(conn, "kt.x", 5, start=5)
    t2 = await _time_after(conn, "KT", 10)
    await publish(conn, "kt.x", 5, start=10)
    assert _sequences(_read(spark, url, "KT", endingTimestamp=t2)) == list(range(1, 11))
    both = _read(spark, url, "KT", startingTimestamp=t1, endingTimestamp=t2)
    assert _sequences(both) == list(range(6, 11))
    iso = datetime.fromtimestamp(t1 / 1000, UTC).isoformat().replace("+00:00", "Z")
    assert _sequences(_read(spark, url, "KT", endingTimestamp=iso)) == list(range(1, 6))
    # No message at or after the ending timestamp: the read ends at the stream's end.
    later = int(time.time() * 1000) + 3_600_000
    assert _sequences(_read(spark, url, "KT", endingTimestamp=later)) == list(range(1, 16))
    # The row that differs: none at or after the starting timestamp reads from the end.
    assert _sequences(_read(spark, url, "KT", startingTimestamp=later)) == []
    # As in Kafka, endingTimestamp is for batch reads only.
    _refused_by_streaming(_stream(spark, url, "KT", endingTimestamp=t2))


# --------------------------------------------------------------------------- per-trigger limits


async def test_max_offsets_per_trigger(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """Kafka's name for the per-micro-batch limit: at most N messages per batch."""
    await make_stream("KMAX", ("kmax.>",))
    await publish(conn, "kmax.x", 25)
    df = _stream(
        spark, nats_server.url, "KMAX", startingOffsets="earliest", maxOffsetsPerTrigger=10
    )
    query, got = _available_now(spark, df, "kafka_max")
    assert _batch_sizes(query) == [10, 10, 5]
    assert got == list(range(1, 26))


async def test_min_partitions(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    await make_stream("KPART", ("kpart.>",))
    await publish(conn, "kpart.x", 30)
    df = _read(spark, nats_server.url, "KPART", minPartitions=3)
    assert df.rdd.getNumPartitions() == 3
    assert _sequences(df) == list(range(1, 31))


async def test_max_records_per_partition(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """Kafka's maxRecordsPerPartition: no task reads more; with minPartitions, the larger split."""
    await make_stream("KMAXR", ("kmaxr.>",))
    await publish(conn, "kmaxr.x", 30)
    df = _read(spark, nats_server.url, "KMAXR", maxRecordsPerPartition=7)
    assert df.rdd.getNumPartitions() == 5
    sizes = df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert max(sizes) <= 7 and sum(sizes) == 30
    assert _sequences(df) == list(range(1, 31))
    both = _read(spark, nats_server.url, "KMAXR", maxRecordsPerPartition=20, minPartitions=4)
    assert both.rdd.getNumPartitions() == 4
    assert _sequences(both) == list(range(1, 31))


@contextmanager
def _every_trigger_reported(spark: Any) -> Iterator[None]:
    """Report a progress event for every trigger, also those that run no batch."""
    key = "spark.sql.streaming.noDataProgressEventInterval"
    before = spark.conf.get(key)
    spark.conf.set(key, "0")
    try:
        yield
    finally:
        spark.conf.set(key, before)


@contextmanager
def _running(df: Any, name: str) -> Iterator[Any]:
    query = (
        df.select("sequence")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        yield query
    finally:
        query.stop()


def _wait_for(query: Any, what: str, found: Callable[[list[Any]], Any]) -> Any:
    """Wait (bounded) until ``found(progress events)`` is truthy; return it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        result = found(list(query.recentProgress))
        if result:
            return result
        query.awaitTermination(0.05)
    pytest.fail(
        f"no {what} within {WAIT:.0f} s: {json.dumps(query.recentProgress, default=str)[-2000:]}"
    )


def _skipped_seeing(stream: str, head: int) -> Callable[[list[Any]], Any]:
    """A trigger that saw the stream's head at ``head`` and ran no batch."""

    def found(progress: list[Any]) -> Any:
        for p in progress:
            latest = json.loads(p["sources"][0]["latestOffset"] or "{}")
            if p["numInputRows"] == 0 and latest.get(stream) == head:
                return p
        return None

    return found


def _batches(progress: list[Any]) -> list[Any]:
    return [p for p in progress if p["numInputRows"] > 0]


def _when(progress: dict[str, Any]) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


async def test_min_offsets_per_trigger_waits_for_the_minimum(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """No batch until 5 new messages exist (maxTriggerDelay far away)."""
    await make_stream("KMIN", ("kmin.>",))
    df = _stream(
        spark,
        nats_server.url,
        "KMIN",
        startingOffsets="earliest",
        minOffsetsPerTrigger=5,
        maxTriggerDelay="1h",
    )
    with _every_trigger_reported(spark), _running(df, "kafka_min") as query:
        # The first trigger after the start runs (as in Kafka), on an empty stream.
        _wait_for(query, "first trigger", _skipped_seeing("KMIN", 0))
        await publish(conn, "kmin.x", 3)
        _wait_for(query, "trigger seeing 3 messages", _skipped_seeing("KMIN", 3))
        await publish(conn, "kmin.x", 2, start=3)
        batches = _wait_for(query, "batch", _batches)
        assert [b["numInputRows"] for b in batches] == [5]
    assert all(p["numInputRows"] in (0, 5) for p in query.recentProgress)


async def test_max_trigger_delay_runs_a_smaller_batch(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """Fewer than minOffsetsPerTrigger messages are read once maxTriggerDelay passed."""
    await make_stream("KDEL", ("kdel.>",))
    df = _stream(
        spark,
        nats_server.url,
        "KDEL",
        startingOffsets="earliest",
        minOffsetsPerTrigger=100,
        maxTriggerDelay="3s",
    )
    with _every_trigger_reported(spark), _running(df, "kafka_delay") as query:
        first = _wait_for(query, "first trigger", _skipped_seeing("KDEL", 0))
        await publish(conn, "kdel.x", 3)
        _wait_for(query, "trigger seeing 3 messages", _skipped_seeing("KDEL", 3))
        batch = _wait_for(query, "batch", _batches)[0]
    assert batch["numInputRows"] == 3
    # The delay counts from the first trigger, which ran (with nothing to read).
    assert _when(batch) - _when(first) >= 3.0 - 0.5  # progress times are the triggers' starts


async def test_available_now_does_not_wait_for_the_minimum(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """Trigger.AvailableNow reads up to its end; waiting for a minimum would end it early.

    The last batch holds 2 messages, under the minimum of 5 (a minimum above the
    maximum is refused, as Kafka refuses it).
    """
    await make_stream("KNOW", ("know.>",))
    await publish(conn, "know.x", 7)
    df = _stream(
        spark,
        nats_server.url,
        "KNOW",
        startingOffsets="earliest",
        minOffsetsPerTrigger=5,
        maxOffsetsPerTrigger=5,
    )
    query, got = _available_now(spark, df, "kafka_now")
    assert _batch_sizes(query) == [5, 2]
    assert got == list(range(1, 8))


async def test_min_offsets_per_trigger_counts_messages_under_a_filter(
    nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """The minimum counts the messages the query reads, not sequences (driver side, no Spark)."""
    from pyspark.sql.streaming.datasource import ReadMinRows

    from oncestream._sync import run_sync
    from oncestream.spark._connections import close_connections
    from oncestream.spark._source import SCHEMA, JetStreamStreamReader

    await make_stream("KCNT", ("kcnt.>",))
    for i in range(10):
        await publish(conn, f"kcnt.{'a' if i % 2 == 0 else 'b'}", 1, start=i)
    options = source_options(
        nats_server.url,
        "KCNT",
        subjects="kcnt.a",
        startingOffsets="earliest",
        minOffsetsPerTrigger=6,
        maxTriggerDelay="1h",
    )
    reader = JetStreamStreamReader(options, SCHEMA)
    try:
        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMinRows(6)
        assert reader.latestOffset(start, limit)["KCNT"] == 10  # the first trigger runs
        # 10 new sequences, but 5 messages on kcnt.a: no batch (the end is the start).
        assert reader.latestOffset(start, limit) == start
        await publish(conn, "kcnt.a", 1, start=10)
        assert reader.latestOffset(start, limit)["KCNT"] == 11
    finally:
        run_sync(close_connections())
