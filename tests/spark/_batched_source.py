"""Micro-batches of N messages on every PySpark, for tests whose subject is not the source.

The kill tests of sinks need several micro-batches from one run. PySpark 4.2+
makes them with ``maxMessagesPerTrigger``; 4.0/4.1 refuse that option (no
admission control for Python sources, spark/_compat.py). There this test-only
reader (format ``jetstream_batched``, option ``testBatchMessages``) ends each batch
N messages after the start Spark told it, counting a new query from the earliest
message, and the query runs on a processing-time trigger until it is caught up
(:func:`run_until_caught_up`) instead of ``Trigger.AvailableNow``.
"""

from __future__ import annotations

from typing import Any

from oncestream.spark._compat import ADMISSION_CONTROL, ReadMaxRows
from oncestream.spark._datasource import JetStreamDataSource
from oncestream.spark._offsets import make_offset
from oncestream.spark._source import JetStreamStreamReader

__all__ = ["ADMISSION_CONTROL", "BatchedSource", "batched_read", "run_until_caught_up"]


class _BatchedReader(JetStreamStreamReader):
    def __init__(self, options: dict[str, str], schema: Any) -> None:
        key = next(k for k in options if k.lower() == "testbatchmessages")  # Spark lowers keys
        self.batch = int(options.pop(key))
        super().__init__(options, schema)

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, Any]:
        conn, infos = self._infos()
        begin = self._seen.offset or make_offset({s: 0 for s in infos}, infos)  # earliest
        return make_offset(self._end_positions(begin, ReadMaxRows(self.batch), conn, infos), infos)


class BatchedSource(JetStreamDataSource):
    """``jetstream`` with test-made batches on PySpark < 4.2."""

    @classmethod
    def name(cls) -> str:
        return "jetstream_batched"

    def streamReader(self, schema: Any) -> Any:
        return _BatchedReader(dict(self.options), schema)


def batched_read(spark: Any, url: str, stream: str, messages: int) -> Any:
    """``readStream`` of ``stream`` from the earliest message in batches of ``messages``."""
    if ADMISSION_CONTROL:
        reader = spark.readStream.format("jetstream").option("maxMessagesPerTrigger", messages)
    else:
        spark.dataSource.register(BatchedSource)
        reader = spark.readStream.format("jetstream_batched").option("testBatchMessages", messages)
    return (
        reader.option("servers", url)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
        .load()
    )


def run_until_caught_up(writer: Any) -> Any:
    """Start ``writer``: AvailableNow on 4.2+, else processing-time triggers until caught up."""
    if ADMISSION_CONTROL:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        return query
    query = writer.trigger(processingTime="50 milliseconds").start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return query
