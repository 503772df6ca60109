"""Registering the ``jetstream`` data source with a SparkSession, and warming a worker."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "warm_worker"]


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


def warm_worker() -> None:
    """Import what a ``jetstream`` read or write task imports, in this (worker) process.

    Call it from a task to take the imports out of the first timed task.
    """
    from . import _reader, _sink  # noqa: F401
