"""A local SparkSession set up the way oncestream's demo, tests and benchmarks need it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_java", "local_session"]

_JAVA_HINT = (
    "install Java 17 or newer (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) "
    "or point JAVA_HOME at one"
)


def check_java() -> str:
    """Return the ``java`` Spark will use, after checking it is Java 17 or newer.

    Raises:
        ConfigError: no java found, or an older one, with what to install.
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise ConfigError(f"Spark needs Java 17+, but no java was found: {_JAVA_HINT}")
    probe = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', probe.stderr + probe.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < 17:
        found = f"Java {major}" if match else "a java whose version is unknown"
        raise ConfigError(f"Spark needs Java 17+, found {found} at {java}: {_JAVA_HINT}")
    return java


def local_session(
    app_name: str = "oncestream",
    *,
    master: str = "local[2]",
    register: bool = True,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """Create (or get) a SparkSession bound to 127.0.0.1 with the jetstream format registered.

    Sets ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` to this interpreter when they
    are unset, so Spark's Python workers import the same oncestream as the driver (a
    script run with a venv's python without activating the venv otherwise starts the
    workers with the system ``python3``); :func:`oncestream.spark.register` checks it.

    Args:
        app_name: Spark application name.
        master: ``local[N]`` or a ``spark://127.0.0.1:PORT`` standalone master.
        register: register the ``jetstream`` data source on the session.
        conf: extra Spark config.

    Raises:
        ConfigError: Java 17+ is missing, or the workers' python cannot import oncestream.

    Example::

        spark = local_session("demo")
        df = spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS").load()
    """
    check_java()
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
