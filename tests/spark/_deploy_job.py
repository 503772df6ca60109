"""The application of tests/spark/test_deploy.py, run by ``spark-submit`` on a standalone cluster.

Usage: ``spark-submit ... tests/spark/_deploy_job.py URL IN OUT PARTITIONS``

Reads stream IN in batch (PARTITIONS sequence ranges) and writes every row to
stream OUT with the jetstream sink. Each row carries, in headers, the Spark
partition and the executor that ran it (its working directory, which lies in
its worker's work dir, plus hostname and pid). The executors' python is the
shipped environment; nothing here is importable on the workers but that.
Prints ``TASKS <json>``: one entry per partition.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

import oncestream.spark


def tag(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Add headers naming the partition and the executor (runs on the executors)."""
    import os
    import socket

    from pyspark import TaskContext

    import oncestream

    context = TaskContext.get()
    partition = str(context.partitionId() if context else -1)
    where = {
        "Oncestream-Partition": [partition],
        "Oncestream-Executor-Dir": [os.getcwd()],
        "Oncestream-Executor": [f"{socket.gethostname()}:{os.getpid()}"],
        "Oncestream-Python": [f"{sys.executable} oncestream {oncestream.__version__}"],
    }
    for batch in batches:
        table = pa.Table.from_batches([batch])
        headers = pa.array(
            [where] * batch.num_rows, type=pa.map_(pa.string(), pa.list_(pa.string()))
        )
        yield from (
            table.select(["subject", "data", "stream", "sequence"])
            .append_column("headers", headers)
            .to_batches()
        )


def main(url: str, source: str, target: str, partitions: str) -> None:
    spark = SparkSession.builder.appName("oncestream-deploy-test").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    oncestream.spark.register(spark)  # checks the executors' python with a one-row task
    rows = (
        spark.read.format("jetstream")
        .option("servers", url)
        .option("stream", source)
        .option("minPartitions", partitions)
        .load()
    )
    schema = (
        "subject string, data binary, stream string, sequence long, "
        "headers map<string,array<string>>"
    )
    (
        rows.selectExpr("concat('deployed.', subject) AS subject", "data", "stream", "sequence")
        .mapInArrow(tag, schema)
        .write.format("jetstream")
        .option("servers", url)
        .option("stream", target)
        .option("createStream", "true")
        .option("createStreamSubjects", "deployed.>")
        .mode("append")
        .save()
    )
    out = (
        spark.read.format("jetstream")
        .option("servers", url)
        .option("stream", target)
        .option("includeHeaders", "true")
        .load()
        .selectExpr(
            "headers['Oncestream-Partition'][0] AS partition",
            "headers['Oncestream-Executor-Dir'][0] AS dir",
            "headers['Oncestream-Executor'][0] AS executor",
            "headers['Oncestream-Python'][0] AS python",
        )
        .groupBy("partition", "dir", "executor", "python")
        .count()
        .collect()
    )
    print("TASKS", json.dumps([row.asDict() for row in out]), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
