"""Subprocess driver for the Iceberg kill tests: IN -> oncestream.spark.iceberg, optionally killed.

Usage: python tests/spark/_iceberg_driver_job.py URL WAREHOUSE CHECKPOINT KILL [REMOTE]
  KILL  none | before:N (SIGKILL the driver in micro-batch N's function, before the
        Iceberg commit) | after:N (after the Iceberg commit, before Spark's commit log)
        | none+read: a run to the end whose classic session then reads table
        lake.orders through Iceberg's Spark runtime (tests/spark/_iceberg_spark.py) and
        writes ``ROWS <count> <distinct>`` to ``spark-rows`` beside the checkpoint
        (one driver runs and reads: each driver is a JVM start)
  REMOTE  a Spark Connect server's sc:// URL (default: a classic local session)

IN is read from the earliest message in batches of 500 (tests/spark/_batched_source.py).
The kill takes down the driver's whole session at once, like a machine failure:
classic, this job's (run it with start_new_session=True); under Connect, where the
function runs in a Python worker of the server, the server's. A ``KILL`` of the form
``...:N`` is planted once: a file ``killed-N`` beside the checkpoint says it fired.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def crash() -> None:
    os.killpg(os.getsid(0), signal.SIGKILL)  # the driver (or the Connect server) and its JVM
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the Python workers


class KillAt:
    """The foreachBatch function: ``oncestream.spark.iceberg``, killed at a planted point."""

    def __init__(self, write: Any, kill: str, marker: str) -> None:
        self.write, self.marker = write, marker
        self.when, _, at = kill.partition(":")
        self.batch = int(at) if at else -1

    def __call__(self, df: Any, batch_id: int) -> None:
        planted = batch_id == self.batch and not os.path.exists(self.marker)
        if planted:
            open(self.marker, "w").close()
        if planted and self.when == "before":
            crash()
        self.write(df, batch_id)
        if planted and self.when == "after":
            crash()


def main() -> None:
    url, warehouse, checkpoint, kill = sys.argv[1:5]
    remote = sys.argv[5] if len(sys.argv) > 5 else None
    kill, plus, read = kill.partition("+")
    conf: dict[str, str] = {}
    if plus and read == "read":
        from tests.spark._iceberg_spark import iceberg_spark_conf

        conf = iceberg_spark_conf(warehouse)
    from oncestream.spark import iceberg
    from tests.spark._batched_source import batched_read, run_until_caught_up

    if remote is None:
        from oncestream.spark import local_session

        spark = local_session("iceberg-kill-job", conf=conf)
    else:
        from pyspark.sql import SparkSession

        import oncestream.spark

        spark = SparkSession.builder.remote(remote).getOrCreate()
        oncestream.spark.register(spark)
    marker = os.path.join(os.path.dirname(checkpoint), f"killed-{kill.replace(':', '-')}")
    write = iceberg("lake.orders", warehouse=warehouse, checkpoint_location=checkpoint)
    df = batched_read(spark, url, "IN", 500).select("stream", "sequence", "subject", "data")
    writer = df.writeStream.foreachBatch(KillAt(write, kill, marker))
    query = run_until_caught_up(writer.option("checkpointLocation", checkpoint))
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    if conf:
        rows = spark.table("oncestream.lake.orders")
        counted = f"ROWS {rows.count()} {rows.select('sequence').distinct().count()}\n"
        with open(os.path.join(os.path.dirname(checkpoint), "spark-rows"), "w") as f:
            f.write(counted)
    spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main()
