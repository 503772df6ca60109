"""Subprocess driver for tests/spark/test_delta_connect.py: oncestream.spark.delta over Connect.

Usage: ``python tests/spark/_delta_connect_job.py URL WORKDIR REMOTE``

Through ``remote(REMOTE)`` (a separately started Connect server) it streams IN into
the Delta table ``WORKDIR/orders`` with ``foreachBatch(delta(..., query_name="orders"))``.
The function runs in the server's Python worker; the first time it fails right after
the Delta commit of a batch (a file marks that it did), so the restarted query
replays that batch. Then a second query without ``query_name`` must fail, naming it.
Prints one JSON line per step.
"""

from __future__ import annotations

import json
import os
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
    write = delta(os.path.join(work, "orders"), query_name="orders")

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
    try:  # refused up front: a Connect client gives neither name nor checkpoint
        nameless = delta(os.path.join(work, "nameless"))
        error = run(nameless, "chk2")
    except ConfigError as exc:
        error = str(exc)
    print("NONAME", json.dumps({"error": error}), flush=True)
    scoped = delta(os.path.join(work, "scoped"), checkpoint_location=os.path.join(work, "chk3"))
    print("SCOPED", json.dumps({"error": run(scoped, "chk3")}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
