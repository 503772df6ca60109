"""Spark driver for bench/peers/faults.py (run in its own session, killed by process group).

Usage::

    python bench/peers/_fault_job.py produce kafka BOOTSTRAP TOPIC N
    python bench/peers/_fault_job.py count kafka BOOTSTRAP TOPIC
    python bench/peers/_fault_job.py sink kafka BOOTSTRAP CHECKPOINT KILL
    python bench/peers/_fault_job.py source kafka BOOTSTRAP OUT CHECKPOINT run|finish
    python bench/peers/_fault_job.py pipe FORMAT TARGET CHECKPOINT

``produce`` writes N records whose key and value are ``o000000``...; ``count`` prints
``COUNTS {"value": times}`` of a topic. ``sink``: topic ``in`` -> foreachBatch ->
Spark's Kafka writer -> topic ``out``, 500 per batch, Trigger.AvailableNow; KILL
``before:N`` SIGKILLs the job after batch N was written, before Spark's commit (the
point where tests/spark/_sink_driver_job.py kills the jetstream sink). ``source``:
topic ``in`` -> Parquet at OUT, as tests/spark/_driver_job.py does for jetstream
(``run``: 20 per batch every 200 ms, ``PROGRESS`` lines; ``finish``: AvailableNow).
``pipe``: ``in`` -> the streaming sink of FORMAT -> ``out`` (jetstream: streams IN and
OUT), 500 per batch, processing-time trigger until caught up for 20 s; prints
``PROGRESS``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _spark(fmt: str) -> Any:
    from oncestream.spark import local_session

    conf = {}
    if fmt == "kafka":
        from bench.peers.kafka import spark_kafka_jars

        conf["spark.jars"] = ",".join(str(p) for p in spark_kafka_jars()[1])
    spark = local_session(f"peers-fault-{fmt}", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _crash() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _progress(spark: Any) -> None:
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            print(f"PROGRESS {event.progress.batchId} {event.progress.numInputRows}", flush=True)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Progress())


def _kafka_in(spark: Any, bootstrap: str, per_batch: int) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .load()
    )


def main(argv: list[str]) -> None:
    job, fmt, target = argv[0], argv[1], argv[2]
    spark = _spark(fmt)
    if job == "produce":
        topic, n = argv[3], int(argv[4])
        spark.range(n, numPartitions=1).selectExpr(
            "format_string('o%06d', id) AS key", "format_string('o%06d', id) AS value"
        ).write.format("kafka").option("kafka.bootstrap.servers", target).option(
            "topic", topic
        ).save()
    elif job == "count":
        rows = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", target)
            .option("subscribe", argv[3])
            .load()
            .selectExpr("cast(value AS string) AS v")
            .collect()
        )
        print("COUNTS " + json.dumps(Counter(r.v for r in rows)), flush=True)
    elif job == "sink":
        checkpoint, kill = argv[3], argv[4]
        kill_batch = int(kill.partition(":")[2] or -1)

        def write(df: Any, batch_id: int) -> None:
            df.selectExpr("key", "value").write.format("kafka").option(
                "kafka.bootstrap.servers", target
            ).option("topic", "out").save()
            if batch_id == kill_batch:
                _crash()

        query = (
            _kafka_in(spark, target, 500)
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    elif job == "source":
        out, checkpoint, mode = argv[3], argv[4], argv[5]
        _progress(spark)
        writer = (
            _kafka_in(spark, target, 20 if mode == "run" else 100)
            .selectExpr("topic", "offset", "cast(value AS string) AS value")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
        )
        if mode == "run":
            writer.trigger(processingTime="200 milliseconds").start().awaitTermination(600)
        else:
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination(300)
            if query.exception() is not None:
                raise SystemExit(f"query failed: {query.exception()}")
    elif job == "pipe":
        checkpoint = argv[3]
        _progress(spark)
        if fmt == "kafka":
            query = (
                _kafka_in(spark, target, 500)
                .selectExpr("key", "value")
                .writeStream.format("kafka")
                .option("kafka.bootstrap.servers", target)
                .option("topic", "out")
            )
        else:
            query = (
                spark.readStream.format("jetstream")
                .option("servers", target)
                .option("stream", "IN")
                .option("startingOffsets", "earliest")
                .option("maxMessagesPerTrigger", "500")
                .load()
                .selectExpr("'out.orders' AS subject", "data", "stream", "sequence")
                .writeStream.format("jetstream")
                .option("servers", target)
                .option("stream", "OUT")
            )
        running = (
            query.option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        idle_since = time.monotonic()
        while running.isActive and time.monotonic() - idle_since < 20:
            progress = running.lastProgress
            if progress is not None and progress["numInputRows"] > 0:
                idle_since = time.monotonic()
            time.sleep(0.5)
        if running.exception() is not None:
            raise SystemExit(f"query failed: {running.exception()}")
        running.stop()
    else:
        raise SystemExit(f"unknown job {job!r}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
