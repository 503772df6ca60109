"""PySpark integration: the ``jetstream`` data source (source and sink).

Example::

    import oncestream.spark

    oncestream.spark.register(spark)
    df = (spark.readStream.format("jetstream")
          .option("servers", "nats://127.0.0.1:4222")
          .option("stream", "ORDERS")
          .load())
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._lag import lag
from ._session import check_java, local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_java", "lag", "local_session", "register", "transactional"]


def __getattr__(name: str) -> object:
    # Lazy, so importing oncestream.spark stays cheap (no pyspark / psycopg).
    if name == "transactional":
        from ._foreach_batch import transactional

        return transactional
    raise AttributeError(f"module 'oncestream.spark' has no attribute {name!r}")


def register(spark: SparkSession, *, check_workers: bool = True) -> None:
    """Register the ``jetstream`` format on ``spark`` (idempotent).

    Args:
        spark: a classic or Spark Connect session.
        check_workers: first check, before any task, that Spark's Python workers
            (``spark.pyspark.python`` / ``PYSPARK_PYTHON``) import this oncestream
            version; cached per session.

    Raises:
        ConfigError: the workers cannot import oncestream, or import another version;
            the message names ``PYSPARK_PYTHON`` and the fix.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if check_workers:
        from ._workers import check_workers as check

        check(spark)
    from ._datasource import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
