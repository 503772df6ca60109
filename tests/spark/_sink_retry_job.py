"""Subprocess driver: an ``ingest=atomic`` batch write whose task fails midway once, retried.

Usage: python _sink_retry_job.py URL MARKER

40,000 rows in 2 partitions go to stream OUT (subjects ``out.>``) with
``ingest=atomic`` and the sink's position ids. The session is ``local[2,2]``
(a failed task is tried again once) with Arrow batches of 2,000 rows.
Partition 0's first attempt raises after handing 8 of its 10 batches to the
sink (and creates MARKER): its retry sends every row again. Exit 0 when the
write succeeded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import functions as F

from oncestream.spark import local_session
from oncestream.spark._datasource import JetStreamDataSource
from oncestream.spark._sink import JetStreamBatchWriter

ROWS, FAIL_AFTER = 40_000, 8


def main() -> None:
    url, marker = sys.argv[1:3]

    def fail_after(batches: Iterator[object], n: int) -> Iterator[object]:
        for i, batch in enumerate(batches):
            if i == n:
                Path(marker).touch()
                raise RuntimeError(f"planted failure after {n} Arrow batches")
            yield batch

    class FlakyWriter(JetStreamBatchWriter):
        def write(self, iterator):  # type: ignore[no-untyped-def]
            ctx = TaskContext.get()
            if ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                iterator = fail_after(iterator, FAIL_AFTER)
            return super().write(iterator)

    class FlakySource(JetStreamDataSource):
        @classmethod
        def name(cls) -> str:
            return "jetstream_flaky"

        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return FlakyWriter(dict(self.options), schema, overwrite)

    spark = local_session(
        "sink-retry-job",
        master="local[2,2]",
        conf={"spark.sql.execution.arrow.maxRecordsPerBatch": "2000"},
    )
    spark.dataSource.register(FlakySource)
    df = spark.range(0, ROWS, numPartitions=2).select(
        F.concat(F.lit("out."), (F.col("id") % 3).cast("string")).alias("subject"),
        F.col("id").cast("string").alias("data"),
    )
    df.write.format("jetstream_flaky").option("servers", url).option("stream", "OUT").option(
        "ingest", "atomic"
    ).mode("append").save()
    spark.stop()


if __name__ == "__main__":
    main()
