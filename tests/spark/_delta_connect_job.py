"""Subprocess driver for tests/spark/test_delta_connect.py: oncestream.spark.delta over Connect.

Usage: ``python tests/spark/_delta_connect_job.py URL WORKDIR REMOTE``

Through ``remote(REMOTE)`` (a separately started Connect server) it streams IN into
the Delta table ``WORKDIR/orders`` with ``foreachBatch(delta(..., query_name="orders",
checkpoint_location=...))``.
The function runs in the server's Python worker; the first time it fails right after
the Delta commit of a batch (a file marks that it did), so the restarted query
replays that batch. Then: a writer without ``checkpoint_location`` is refused up front
(NONAME); a one-batch query, its checkpoint deleted, and the same query again: both
batches written (NEWCKPT); a query handed another's checkpoint_location fails (WRONGCKPT).
Prints one JSON line per step.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

from pyspark.sql import SparkSession

import oncestream.spark
from oncestream import ConfigError
from oncestream.spark import delta


def main(url: str, work: str, remote: str) -> None:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    oncestream.spark.register(spark)
    marker = os.path.join(work, "crashed-once")
    chk = os.path.join(work, "chk")
    write = delta(os.path.join(work, "orders"), query_name="orders", checkpoint_location=chk)

    def crash_once(df: Any, batch_id: int) -> None:
        write(df, batch_id)
        if not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(batch_id))
            raise RuntimeError("planted crash between the Delta commit and Spark's")

    def run(function: Any, checkpoint: str) -> str | None:
        query = (
            spark.readStream.format("jetstream")
            .option("servers", url)
            .option("stream", "IN")
            .option("startingOffsets", "earliest")
            .load()
            .select("stream", "sequence", "data")
            .writeStream.foreachBatch(function)
            .option("checkpointLocation", os.path.join(work, checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        except Exception as exc:
            return str(exc)[:2000]
        error = query.exception()
        return None if error is None else str(error)[:2000]

    print("FIRST", json.dumps({"error": run(crash_once, "chk")}), flush=True)
    print("SECOND", json.dumps({"error": run(crash_once, "chk")}), flush=True)
    try:  # refused up front: under Connect a name alone cannot tell a new checkpoint
        nameless = delta(os.path.join(work, "nameless"), query_name="orders")
        error = run(nameless, "chk2")
    except ConfigError as exc:
        error = str(exc)
    print("NONAME", json.dumps({"error": error}), flush=True)
    once = os.path.join(work, "chk5")
    errors = []
    for _ in range(2):  # one batch each; the checkpoint deleted in between
        again = delta(os.path.join(work, "twice"), query_name="orders", checkpoint_location=once)
        errors.append(run(again, "chk5"))
        shutil.rmtree(once)
    print("NEWCKPT", json.dumps({"errors": errors}), flush=True)
    copied = delta(os.path.join(work, "orders"), query_name="orders", checkpoint_location=chk)
    print("WRONGCKPT", json.dumps({"error": run(copied, "chk4")}), flush=True)
    scoped = delta(os.path.join(work, "scoped"), checkpoint_location=os.path.join(work, "chk3"))
    print("SCOPED", json.dumps({"error": run(scoped, "chk3")}), flush=True)
    spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main(*sys.argv[1:4])
