"""Subprocess Spark driver for the source's kill and standalone-cluster tests.

Usage::

    python -m tests.spark._driver_job stream URL STREAM OUT CHECKPOINT MODE [MASTER]
    python -m tests.spark._driver_job count URL STREAM MASTER

``stream`` runs a Structured Streaming query from the jetstream source into a
Parquet sink (MODE ``run``: processing-time trigger, 20 messages per batch,
runs until killed, printing ``PROGRESS <batchId> <rows>`` per batch; MODE
``finish``: Trigger.AvailableNow, 100 messages per batch, exits 0 when caught up;
on PySpark < 4.2, which has no read limits, each batch reads what is there). ``count`` reads
the stream in batch mode and prints ``SEQUENCES <json list>``. A MASTER of
``sc://host:port`` runs the query through that Spark Connect server instead
(the query runs there; this process prints its progress).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def stream_job(url: str, stream: str, out: str, checkpoint: str, mode: str, master: str) -> None:
    remote = master.startswith("sc://")
    if remote:
        from pyspark.sql import SparkSession

        import oncestream.spark

        spark = SparkSession.builder.remote(master).getOrCreate()
        oncestream.spark.register(spark)
    else:
        from pyspark.sql.streaming import StreamingQueryListener

        from oncestream.spark import local_session

        spark = local_session(f"oncestream-driver-job-{mode}", master=master)

        class Progress(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                print("STARTED", flush=True)

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                print(f"PROGRESS {p.batchId} {p.numInputRows}", flush=True)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        spark.streams.addListener(Progress())
    from oncestream.spark._compat import ADMISSION_CONTROL

    reader = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
    )
    if ADMISSION_CONTROL:  # PySpark < 4.2 refuses it: each batch reads what is there
        reader = reader.option("maxMessagesPerTrigger", "20" if mode == "run" else "100")
    df = reader.load()
    writer = (
        df.select("stream", "sequence", "data")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "run":
        query = writer.trigger(processingTime="200 milliseconds").start()
        if remote:
            _print_progress(query, 600)
        query.awaitTermination(600)
    else:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(300)
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


def _print_progress(query: Any, timeout: float) -> None:
    """Print ``PROGRESS <batchId> <rows>`` for each batch of a Connect query, polled."""
    import time

    seen = -1
    deadline = time.monotonic() + timeout
    while query.isActive and time.monotonic() < deadline:
        for p in query.recentProgress:
            if p.batchId > seen:
                seen = p.batchId
                print(f"PROGRESS {p.batchId} {p.numInputRows}", flush=True)
        query.awaitTermination(0.2)  # the server pushes no progress to a client: poll


def count_job(url: str, stream: str, master: str) -> None:
    from oncestream.spark import local_session

    spark = local_session("oncestream-driver-count", master=master)
    df = (
        spark.read.format("jetstream")
        .option("servers", url)
        .option("stream", stream)
        .option("minPartitions", "4")
        .load()
    )
    seqs = [r.sequence for r in df.select("sequence").collect()]
    # Block managers = the driver + one per executor that took part.
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("SEQUENCES " + json.dumps(seqs), flush=True)
    print(f"EXECUTORS {executors}", flush=True)
    spark.stop()


def main(argv: list[str]) -> None:
    if argv[0] == "stream":
        master = argv[6] if len(argv) > 6 else "local[2]"
        stream_job(argv[1], argv[2], argv[3], argv[4], argv[5], master)
    elif argv[0] == "count":
        count_job(argv[1], argv[2], argv[3])
    else:
        raise SystemExit(f"unknown job {argv[0]!r}")


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main(sys.argv[1:])
