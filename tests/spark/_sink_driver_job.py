"""Subprocess driver for the sink's kill tests: IN -> jetstream sink -> OUT, optionally killed.

Usage: python _sink_driver_job.py URL CHECKPOINT IDS KILL [SUBJECT]
  IDS   lineage (rows keep the source's stream/sequence) or position (they don't)
  KILL  none | before:N (SIGKILL the whole process group after the tasks of
        micro-batch N wrote, before the sink's commit) | after:N (after the
        sink recorded the commit, before Spark wrote its commit log)
  SUBJECT  the output subject (default out.orders; stream OUT captures out.>)

Run it in its own session (start_new_session=True): the kill takes the driver,
the JVM and every Python worker down at once, like a machine failure.
"""

from __future__ import annotations

import os
import signal
import sys

from pyspark.sql import functions as F

from oncestream.spark import local_session
from oncestream.spark._datasource import JetStreamDataSource
from oncestream.spark._sink import JetStreamStreamWriter
from tests.spark._batched_source import batched_read, run_until_caught_up


def main() -> None:
    url, checkpoint, ids, kill = sys.argv[1:5]
    subject = sys.argv[5] if len(sys.argv) > 5 else "out.orders"
    ingest = sys.argv[6] if len(sys.argv) > 6 else "auto"
    mode, _, at = kill.partition(":")
    kill_batch = int(at) if at else -1

    # Python workers run in their own process group; they find the driver's in the environment.
    os.environ["SINK_JOB_PGID"] = str(os.getpgrp())

    def crash() -> None:
        os.killpg(int(os.environ["SINK_JOB_PGID"]), signal.SIGKILL)  # driver + JVM
        os.killpg(os.getpgrp(), signal.SIGKILL)  # the Python workers

    class FaultyWriter(JetStreamStreamWriter):
        def commit(self, messages, batchId):  # type: ignore[no-untyped-def]
            if mode == "before" and batchId == kill_batch:
                crash()
            super().commit(messages, batchId)
            if mode == "after" and batchId == kill_batch:
                crash()

    class FaultySource(JetStreamDataSource):
        @classmethod
        def name(cls) -> str:
            return "jetstream_faulty"

        def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return FaultyWriter(dict(self.options), schema, overwrite)

    spark = local_session("sink-kill-job")
    spark.dataSource.register(FaultySource)
    source = batched_read(spark, url, "IN", 500)  # 500-message batches on every PySpark
    columns = [F.lit(subject).alias("subject"), "data"]
    if ids == "lineage":
        columns += ["stream", "sequence"]
    elif ids == "column":  # a msg_id column: the sink publishes Arrow columns (publish_columns)
        columns.append(F.concat(F.lit("in-"), F.col("sequence").cast("string")).alias("msg_id"))
    run_until_caught_up(
        source.select(*columns)
        .writeStream.format("jetstream_faulty")
        .option("servers", url)
        .option("stream", "OUT")
        .option("ackTimeout", "200ms")
        .option("maxAttempts", "3")
        .option("ingest", ingest)
        .option("checkpointLocation", checkpoint)
    )
    spark.stop()


if __name__ == "__main__":
    main()
