"""Subprocess Spark driver for tests/integration/test_prometheus.py.

Usage::

    python -m tests.integration._spark_metrics_job URL SOURCE TARGET CHECKPOINT PORT

Streams SOURCE into TARGET (``jetstream`` source and sink, 50 messages per
micro-batch), exports the query's metrics with ``oncestream.spark.instrument_query``
on ``127.0.0.1:PORT``, prints ``READY`` and runs until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import time


def main(url: str, source: str, target: str, checkpoint: str, port: int) -> None:
    from pyspark.sql import functions as F

    from oncestream import ConnectOptions
    from oncestream.metrics import serve_metrics
    from oncestream.spark import instrument_query, local_session

    # Only recorded: Event.set() in a handler deadlocks if it interrupts Event.wait().
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    spark = local_session("oncestream-metrics-job")
    df = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", source)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "50")
        .load()
    )
    query = (
        df.select(
            F.concat(F.lit("out."), F.col("subject")).alias("subject"),
            "data",
            "stream",
            "sequence",
        )
        .writeStream.format("jetstream")
        .option("servers", url)
        .option("stream", target)
        .option("checkpointLocation", checkpoint)
        .queryName("metrics_job")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    metrics = instrument_query(query, options=ConnectOptions(servers=(url,)))
    server = serve_metrics(port)
    print("READY", flush=True)
    deadline = time.monotonic() + 600
    while not stopping and time.monotonic() < deadline:
        time.sleep(0.2)  # noticed within 0.2 s (sleep resumes after a handler, PEP 475)
    server.close()
    metrics.close()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
