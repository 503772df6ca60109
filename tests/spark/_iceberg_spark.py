"""Iceberg's own Spark runtime for the tests: which release, its jars, and the catalog conf.

Spark reads the tables oncestream.spark.iceberg writes the way users do: through
Iceberg's Spark runtime (``iceberg-spark-runtime-<spark>_2.13``), its catalog a
``JdbcCatalog`` on the same SQLite file pyiceberg's SQL catalog keeps (the two
share the schema, and the catalog's name keys its rows). The jars come from
Maven Central on first use through Spark's resolver (``spark.jars.packages``),
cached in ``.peers/ivy`` as tests/spark/_delta_spark.py caches delta-spark's.
Spark releases without a runtime get a clear error instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyspark

from oncestream.spark._compat import SPARK_VERSION

ROOT = Path(__file__).resolve().parents[2]
IVY = Path(os.environ.get("ONCESTREAM_PEERS", ROOT / ".peers")) / "ivy"

#: Spark (major, minor) -> the Iceberg release whose Spark runtime is built for it
#: (Maven Central, org.apache.iceberg:iceberg-spark-runtime-<major.minor>_2.13).
ICEBERG_FOR_SPARK = {(4, 0): "1.10.0", (4, 1): "1.12.0"}
#: The SQLite JDBC driver Iceberg's JdbcCatalog opens the catalog file with.
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"


class IcebergSparkUnsupported(RuntimeError):
    """Iceberg has no Spark runtime for the running Spark."""


def iceberg_runtime() -> str:
    """The Maven coordinates of Iceberg's Spark runtime for the installed PySpark.

    Raises:
        IcebergSparkUnsupported: none is known for it (the message names those that are).
    """
    version = ICEBERG_FOR_SPARK.get(SPARK_VERSION)
    if version is None:
        known = ", ".join(f"Spark {a}.{b}: Iceberg {v}" for (a, b), v in ICEBERG_FOR_SPARK.items())
        raise IcebergSparkUnsupported(
            f"no Iceberg Spark runtime is set up here for PySpark {pyspark.__version__} "
            f"(known: {known}); read the tables with pyiceberg instead"
        )
    major, minor = SPARK_VERSION
    return f"org.apache.iceberg:iceberg-spark-runtime-{major}.{minor}_2.13:{version}"


def iceberg_spark_conf(warehouse: str, catalog: str = "oncestream") -> dict[str, str]:
    """Spark config whose Iceberg catalog ``catalog`` is the embedded one of ``warehouse``."""
    IVY.mkdir(parents=True, exist_ok=True)
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        "spark.jars.packages": f"{iceberg_runtime()},{SQLITE_JDBC}",
        "spark.jars.ivy": str(IVY),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"jdbc:sqlite:{warehouse}/catalog.db",
        f"{prefix}.warehouse": f"file://{warehouse}",
    }
