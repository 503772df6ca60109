"""Subprocess driver for tests/spark/test_worker_check.py (issue 12).

Usage: ``python tests/spark/_worker_check_job.py URL STREAM FAKE_PYTHON``

Run by the venv's python *without* PYSPARK_PYTHON, as a user running a script
without activating the venv would. Prints one line per case:

- ``MISSING <message>`` / ``JOBS <n>``: PYSPARK_PYTHON unset (workers would run
  ``python3``, which has no oncestream): register() refuses before any job;
- ``MISMATCH <message>``: PYSPARK_PYTHON runs another oncestream version;
- ``ROWS <n>``: PYSPARK_PYTHON set to this interpreter: the read works.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import oncestream.spark
from oncestream import ConfigError


def session() -> SparkSession:
    return (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def main(url: str, stream: str, fake_python: str) -> None:
    assert "PYSPARK_PYTHON" not in os.environ
    spark = session()
    try:
        oncestream.spark.register(spark)
        print("MISSING no error", flush=True)
    except ConfigError as exc:
        print("MISSING", str(exc).replace("\n", " "), flush=True)
    print("JOBS", len(spark.sparkContext.statusTracker().getJobIdsForGroup()), flush=True)
    spark.stop()

    os.environ["PYSPARK_PYTHON"] = fake_python
    spark = session()
    try:
        oncestream.spark.register(spark)
        print("MISMATCH no error", flush=True)
    except ConfigError as exc:
        print("MISMATCH", str(exc).replace("\n", " "), flush=True)
    spark.stop()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = session()
    oncestream.spark.register(spark)
    df = spark.read.format("jetstream").option("servers", url).option("stream", stream).load()
    print("ROWS", df.count(), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
