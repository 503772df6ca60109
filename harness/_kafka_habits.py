"""The same queries on Spark's Kafka source and on the jetstream source (issue 26, item 3).

Each scenario writes a fresh log (a Kafka topic with one partition, or a stream),
runs one query with the Kafka-habit option under its Kafka name and returns what
the query saw: rows (the values, in order) and, for streaming queries, the
micro-batch boundaries. ``bench/peers/habits.py`` runs them on Kafka and records
the results in ``tests/spark/kafka_habits.json``; ``test_kafka_habits.py`` runs them
on jetstream (in ``make test``) and compares.

Offsets: a Kafka offset counts from 0, a stream sequence from 1, so "the message at
position p" is Kafka offset ``p`` and sequence ``p + 1``; the scenarios name
positions and each side turns them into its own numbers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from ._publish import publish_n

__all__ = ["NOT_COMPARED", "RUNNERS", "SCENARIOS", "JetStreamSide", "KafkaSide", "Side", "run_all"]

#: The Kafka-habit options each scenario exercises.
SCENARIOS: dict[str, tuple[str, ...]] = {
    "offsets": ("startingOffsets", "endingOffsets"),
    "ending_timestamp": ("endingTimestamp",),
    "max_offsets": ("maxOffsetsPerTrigger",),
    "min_offsets": ("minOffsetsPerTrigger", "maxTriggerDelay"),
    "min_partitions": ("minPartitions",),
    "headers": ("includeHeaders",),
}
#: Options of the doc's "works as in Kafka" table not run on both sources, and why.
NOT_COMPARED = {
    "failOnDataLoss": "needs records removed by retention: Kafka's deleteRecords has no "
    "Spark-side equivalent here; tests/spark/test_source_streaming.py::test_retention_gap "
    "covers the jetstream side",
}


class Side(Protocol):
    """One system: a fresh log per scenario, publishing, and its source's options."""

    fmt: str
    spark: Any

    def fresh(self, name: str) -> None: ...
    def publish(self, start: int, count: int, *, headers: bool = False) -> None: ...
    def options(self) -> dict[str, str]: ...
    def position(self, pos: int) -> str: ...  # startingOffsets/endingOffsets JSON
    def value_column(self) -> str: ...
    def headers(self, row: Any) -> dict[str, list[str]]: ...


def _values(side: Side, df: Any) -> list[str]:
    col = side.value_column()
    return [bytes(r[0]).decode() for r in df.select(col).collect()]


def offsets(side: Side) -> dict[str, Any]:
    side.fresh("offsets")
    side.publish(0, 30)
    df = (
        side.spark.read.format(side.fmt)
        .options(**side.options())
        .option("startingOffsets", side.position(5))
        .option("endingOffsets", side.position(12))
        .load()
    )
    return {"rows": _values(side, df)}


def ending_timestamp(side: Side) -> dict[str, Any]:
    side.fresh("endts")
    side.publish(0, 10)
    time.sleep(1.0)
    cut = int(time.time() * 1000)
    time.sleep(1.0)
    side.publish(10, 10)
    df = (
        side.spark.read.format(side.fmt)
        .options(**side.options())
        .option("endingTimestamp", str(cut))
        .load()
    )
    return {"rows": _values(side, df)}


def _stream(
    side: Side, options: dict[str, str], trigger: dict[str, Any]
) -> tuple[Any, list[list[str]]]:
    import tempfile

    batches: list[list[str]] = []
    col = side.value_column()

    def collect(df: Any, _batch_id: int) -> None:
        rows = [bytes(r[0]).decode() for r in df.select(col).collect()]
        if rows:
            batches.append(rows)

    query = (
        side.spark.readStream.format(side.fmt)
        .options(**side.options())
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="habits-chk-"))
        .trigger(**trigger)
        .start()
    )
    return query, batches


def max_offsets(side: Side) -> dict[str, Any]:
    side.fresh("maxoff")
    side.publish(0, 30)
    query, batches = _stream(side, {"maxOffsetsPerTrigger": "7"}, {"availableNow": True})
    query.awaitTermination(120)
    return {"batches": batches}


def _wait(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def min_offsets(side: Side) -> dict[str, Any]:
    """30 stored; the first trigger runs; 3 more wait for the 4 s delay; 6 more run at once."""
    side.fresh("minoff")
    side.publish(0, 30)
    opts = {"minOffsetsPerTrigger": "5", "maxTriggerDelay": "4s"}
    query, batches = _stream(side, opts, {"processingTime": "250 milliseconds"})
    try:
        _wait(lambda: len(batches) >= 1, 120)
        side.publish(30, 3)
        time.sleep(1.5)
        waited = len(batches)  # 1: three are fewer than the minimum
        _wait(lambda: len(batches) >= 2, 15)
        side.publish(33, 6)
        _wait(lambda: len(batches) >= 3, 10)
    finally:
        query.stop()
    return {"batches": batches, "batches_1.5s_after_3_more": waited}


def min_partitions(side: Side) -> dict[str, Any]:
    side.fresh("minpart")
    side.publish(0, 30)
    df = side.spark.read.format(side.fmt).options(**side.options()).option("minPartitions", "3")
    parts = df.load().select(side.value_column()).rdd.glom().collect()
    return {"partitions": [[bytes(r[0]).decode() for r in part] for part in parts]}


def headers(side: Side) -> dict[str, Any]:
    side.fresh("headers")
    side.publish(0, 5, headers=True)
    df = side.spark.read.format(side.fmt).options(**side.options())
    rows = df.option("includeHeaders", "true").load().collect()
    return {"headers": [side.headers(r) for r in rows]}


RUNNERS: dict[str, Callable[[Side], dict[str, Any]]] = {
    "offsets": offsets,
    "ending_timestamp": ending_timestamp,
    "max_offsets": max_offsets,
    "min_offsets": min_offsets,
    "min_partitions": min_partitions,
    "headers": headers,
}


class JetStreamSide:
    """The jetstream source on a nats-server at ``url``: one stream per scenario."""

    fmt = "jetstream"

    def __init__(self, spark: Any, url: str) -> None:
        self.spark, self.url, self.stream = spark, url, ""

    def _run(self, make: Callable[[Any], Any]) -> None:
        from oncestream import ConnectOptions, connect

        async def go() -> None:
            async with await connect(ConnectOptions(servers=(self.url,))) as conn:
                await make(conn)

        asyncio.run(go())

    def fresh(self, name: str) -> None:
        from oncestream.streams import StreamSpec, ensure_stream

        self.stream = f"HABITS_{name.upper()}"
        spec = StreamSpec(name=self.stream, subjects=(f"habits.{name}",))
        self._run(lambda conn: ensure_stream(conn, spec))

    def publish(self, start: int, count: int, *, headers: bool = False) -> None:
        subject = f"habits.{self.stream.removeprefix('HABITS_').lower()}"
        self._run(
            lambda conn: publish_n(
                conn,
                subject,
                count,
                start=start,
                data=lambda i: b"m%d" % i,
                headers=(lambda i: {"k": f"v{i}"}) if headers else None,
            )
        )

    def options(self) -> dict[str, str]:
        return {"servers": self.url, "stream": self.stream}

    def position(self, pos: int) -> str:
        return json.dumps({self.stream: {"0": pos + 1}})

    def value_column(self) -> str:
        return "data"

    def headers(self, row: Any) -> dict[str, list[str]]:
        return {k: list(v) for k, v in sorted((row["headers"] or {}).items())}


class KafkaSide:
    """Spark's Kafka source on a broker at ``bootstrap``: one topic per scenario."""

    fmt = "kafka"

    def __init__(self, spark: Any, bootstrap: str) -> None:
        self.spark, self.bootstrap, self.topic = spark, bootstrap, ""

    def fresh(self, name: str) -> None:
        self.topic = f"habits-{name}"

    def publish(self, start: int, count: int, *, headers: bool = False) -> None:
        cols = ["cast(concat('m', cast(id AS string)) AS binary) AS value"]
        if headers:
            cols.append(
                "array(named_struct('key', 'k', 'value', "
                "cast(concat('v', cast(id AS string)) AS binary))) AS headers"
            )
        self.spark.range(start, start + count, numPartitions=1).selectExpr(*cols).write.format(
            "kafka"
        ).option("kafka.bootstrap.servers", self.bootstrap).option("topic", self.topic).save()

    def options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap, "subscribe": self.topic}

    def position(self, pos: int) -> str:
        return json.dumps({self.topic: {"0": pos}})

    def value_column(self) -> str:
        return "value"

    def headers(self, row: Any) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for h in row["headers"] or []:
            out.setdefault(h["key"], []).append(bytes(h["value"]).decode())
        return dict(sorted(out.items()))


def run_all(side: Side) -> dict[str, Any]:
    return {name: run(side) for name, run in RUNNERS.items()}
