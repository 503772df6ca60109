"""A local SparkSession set up the way oncestream's demo, tests and benchmarks need it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["local_session"]


def local_session(
    app_name: str = "oncestream",
    *,
    master: str = "local[2]",
    register: bool = True,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """Create (or get) a SparkSession bound to 127.0.0.1 with the jetstream format registered.

    Args:
        app_name: Spark application name.
        master: ``local[N]`` or a ``spark://127.0.0.1:PORT`` standalone master.
        register: register the ``jetstream`` data source on the session.
        conf: extra Spark config.

    Example::

        spark = local_session("demo")
        df = spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS").load()
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if register:
        from . import register as register_source

        register_source(spark)
    return spark
