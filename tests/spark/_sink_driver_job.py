"""Subprocess driver for the sink's kill tests: IN -> jetstream sink -> OUT, optionally killed.

Usage: python _sink_driver_job.py URL CHECKPOINT IDS KILL [SUBJECT [INGEST [STREAM [REMOTE]]]]
  IDS   lineage (rows keep the source's stream/sequence) or position (they don't)
        or column (a msg_id column)
  KILL  none | before:N (SIGKILL the driver after the tasks of micro-batch N
        wrote, before the sink's commit) | after:N (after the sink recorded the
        commit, before Spark wrote its commit log)
  SUBJECT  the output subject (default out.orders; stream OUT captures out.>)
  INGEST   the sink's ingest option (default auto)
  STREAM   the sink's stream option: OUT (default), or - to leave it out (the sink
           finds OUT from the subject)
  REMOTE   a Spark Connect server's sc:// URL (default: a classic local session)

The kill takes down the driver's whole session at once, like a machine
failure: classic, this job's (run it with start_new_session=True: its JVM and
Python workers share its session); under Connect, the Connect server's (the
driver is the server, where the sink's commit runs; start it in a session of
its own). pyspark's worker daemon runs in a process group of its own inside
that session, so both groups are killed.
"""

from __future__ import annotations

import os
import signal
import sys

from pyspark.sql import functions as F

from oncestream.spark._datasource import JetStreamDataSource
from oncestream.spark._sink import JetStreamStreamWriter
from tests.spark._batched_source import batched_read, run_until_caught_up


def main() -> None:
    url, checkpoint, ids, kill = sys.argv[1:5]
    subject = sys.argv[5] if len(sys.argv) > 5 else "out.orders"
    ingest = sys.argv[6] if len(sys.argv) > 6 else "auto"
    stream = sys.argv[7] if len(sys.argv) > 7 else "OUT"
    remote = sys.argv[8] if len(sys.argv) > 8 else None
    mode, _, at = kill.partition(":")
    kill_batch = int(at) if at else -1

    def crash() -> None:
        # Runs in a Python worker of the driver: its session is the driver's.
        os.killpg(os.getsid(0), signal.SIGKILL)  # the driver and its JVM
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

    if remote is None:
        from oncestream.spark import local_session

        spark = local_session("sink-kill-job")
    else:
        from pyspark.sql import SparkSession

        import oncestream.spark

        spark = SparkSession.builder.remote(remote).getOrCreate()
        oncestream.spark.register(spark)
    spark.dataSource.register(FaultySource)
    source = batched_read(spark, url, "IN", 500)  # 500-message batches on every PySpark
    columns = [F.lit(subject).alias("subject"), "data"]
    if ids == "lineage":
        columns += ["stream", "sequence"]
    elif ids == "column":  # a msg_id column: the sink publishes Arrow columns (publish_columns)
        columns.append(F.concat(F.lit("in-"), F.col("sequence").cast("string")).alias("msg_id"))
    writer = (
        source.select(*columns)
        .writeStream.format("jetstream_faulty")
        .option("servers", url)
        .option("ackTimeout", "200ms")
        .option("maxAttempts", "3")
        .option("ingest", ingest)
        .option("checkpointLocation", checkpoint)
    )
    if stream != "-":
        writer = writer.option("stream", stream)
    query = run_until_caught_up(writer)
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main()
