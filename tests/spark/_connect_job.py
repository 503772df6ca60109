"""Subprocess driver for tests/spark/test_connect.py: one Spark Connect session.

Usage: ``python tests/spark/_connect_job.py URL WORKDIR REMOTE``

A process can hold either a classic session or a Connect one, so this runs
apart from the shared test session. Through ``remote(REMOTE)`` (a separately
started server's ``sc://host:port``, or ``local[2]``) it checks
the workers (register), batch-reads stream ``IN``, batch-writes to ``BATCH_OUT``,
and runs a streaming query ``IN`` -> ``STREAM_OUT``; prints one JSON line per step.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession

import oncestream.spark


def main(url: str, work: str, remote: str) -> None:
    started = time.monotonic()
    spark = SparkSession.builder.remote(remote).getOrCreate()
    print("SESSION", json.dumps({"type": type(spark).__module__}), flush=True)
    mark = time.monotonic()
    oncestream.spark.register(spark)
    print("REGISTER", json.dumps({"seconds": round(time.monotonic() - mark, 2)}), flush=True)

    df = spark.read.format("jetstream").option("servers", url).option("stream", "IN").load()
    rows = df.select("sequence", "data").collect()
    print("READ", json.dumps(sorted(r["sequence"] for r in rows)), flush=True)

    (
        df.selectExpr("concat('bout.', subject) AS subject", "data", "stream", "sequence")
        .write.format("jetstream")
        .option("servers", url)
        .option("stream", "BATCH_OUT")
        .option("createStream", "true")
        .option("createStreamSubjects", "bout.>")
        .mode("append")
        .save()
    )
    out = spark.read.format("jetstream").option("servers", url).option("stream", "BATCH_OUT")
    print("WRITE", json.dumps(out.load().count()), flush=True)

    query = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", "IN")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "25")
        .load()
        .selectExpr("concat('sout.', subject) AS subject", "data", "stream", "sequence")
        .writeStream.format("jetstream")
        .option("servers", url)
        .option("stream", "STREAM_OUT")
        .option("createStream", "true")
        .option("createStreamSubjects", "sout.>")
        .option("checkpointLocation", f"{work}/chk")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    behind = oncestream.spark.lag(query)
    out = spark.read.format("jetstream").option("servers", url).option("stream", "STREAM_OUT")
    print("STREAM", json.dumps({"rows": out.load().count(), "lag": behind}), flush=True)
    print("TOTAL", json.dumps({"seconds": round(time.monotonic() - started, 1)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main(sys.argv[1], sys.argv[2], sys.argv[3])
