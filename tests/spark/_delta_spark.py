"""Delta Lake's own Spark connector (delta-spark) for the tests: which release, and its jars.

delta-spark is JVM code built per Spark minor: Delta 4.0 for Spark 4.0. Its jars
come from Maven Central on first use through Spark's own resolver
(``spark.jars.packages``, Ivy), cached in ``.peers/ivy`` (ignored by git) like
bench-peers caches Kafka's, so a fresh machine needs nothing installed by hand.
Spark releases delta-spark does not support get a clear error instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyspark

from oncestream.spark._compat import SPARK_VERSION

ROOT = Path(__file__).resolve().parents[2]
IVY = Path(os.environ.get("ONCESTREAM_PEERS", ROOT / ".peers")) / "ivy"

#: Spark (major, minor) -> the delta-spark release built for it (Maven Central,
#: io.delta:delta-spark_2.13).
DELTA_FOR_SPARK = {(4, 0): "4.0.1"}


class DeltaSparkUnsupported(RuntimeError):
    """delta-spark has no release for the running Spark."""


def delta_spark_version() -> str:
    """The delta-spark release for the installed PySpark.

    Raises:
        DeltaSparkUnsupported: none is known for it (the message names those that are).
    """
    version = DELTA_FOR_SPARK.get(SPARK_VERSION)
    if version is None:
        known = ", ".join(f"Spark {a}.{b}: Delta {v}" for (a, b), v in DELTA_FOR_SPARK.items())
        raise DeltaSparkUnsupported(
            f"no delta-spark release is set up here for PySpark {pyspark.__version__} "
            f"(known: {known}); write Delta tables with oncestream.spark.delta (delta-rs) instead"
        )
    return version


def delta_spark_conf() -> dict[str, str]:
    """Spark config that loads delta-spark (jars resolved once from Maven Central)."""
    IVY.mkdir(parents=True, exist_ok=True)
    return {
        "spark.jars.packages": f"io.delta:delta-spark_2.13:{delta_spark_version()}",
        "spark.jars.ivy": str(IVY),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
