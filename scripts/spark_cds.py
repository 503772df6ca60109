#!/usr/bin/env python3
"""Build a class-data-sharing archive of a Spark driver's classes for the test JVMs.

    python3 scripts/spark_cds.py VENV     # -> VENV/spark-cds.jsa

make test starts well over a hundred Spark JVMs (every driver a test kills, every
Connect server, each worker's session). Most of a short-lived driver's CPU goes to
loading and verifying Spark's classes; the JDK can map them from an archive instead
(JDK 13+ dynamic CDS: ``-XX:ArchiveClassesAtExit`` writes it, ``-XX:SharedArchiveFile``
reads it). On this 2-core machine kind a local driver's start and three small queries
took 9.5-11.1 CPU s with the archive against 14.2-15.5 without.

This runs a small workload (batch, Python rows, a group-by, a streaming query) with
VENV's python and its pyspark, under ``-XX:ArchiveClassesAtExit``, waits for the JVM
to write the archive as it exits, and moves it into place (never a half-written file:
it is written beside and renamed). The Makefile passes it to the test JVMs with
``-Xlog:cds=off,cds+dynamic=off``: an archive that does not match the JVM or the class
path is ignored in silence, which costs speed only, never a result.

Exit 0 with the archive in place; 1 when the workload or the JVM failed (its output is
printed); 2 bad usage.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHIVE = "spark-cds.jsa"
# The test JVMs' own options (Makefile TEST_JVM_OPTS): the archive is made by a JVM
# configured like the ones that read it.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
WORKLOAD_TIMEOUT = 300

WORKLOAD = r"""
import sys
from pyspark import SparkContext
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.range(100_000).selectExpr("sum(id)").collect()
rows = spark.createDataFrame([(i, str(i % 7)) for i in range(1000)], "a int, b string")
rows.groupBy("b").count().collect()
query = (
    spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    .writeStream.format("memory").queryName("cds").trigger(once=True).start()
)
query.awaitTermination(120)
spark.stop()
gateway = SparkContext._gateway
proc = getattr(gateway, "proc", None)
if proc is not None:
    # The JVM leaves when its stdin closes, writing the archive on its way out.
    proc.stdin.close()
    sys.exit(0 if proc.wait(timeout=240) in (0, 1, 143) else 3)
"""


def build(venv: Path) -> int:
    python = venv / "bin" / "python"
    if not os.access(python, os.X_OK):
        print(f"spark_cds: {python} is not an executable python (a venv with pyspark)")
        return 2
    target = venv / ARCHIVE
    with tempfile.TemporaryDirectory(prefix="spark-cds-", dir=venv) as tmp:
        partial = Path(tmp) / ARCHIVE
        env = dict(
            os.environ,
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=str(python),
            PYSPARK_DRIVER_PYTHON=str(python),
            SPARK_SUBMIT_OPTS=f"{JVM_OPTS} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off",
        )
        proc = subprocess.run(
            [str(python), "-c", WORKLOAD],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=WORKLOAD_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            print(f"spark_cds: no archive for {venv} (workload exit {proc.returncode})")
            return 1
        os.replace(partial, target)
    print(f"spark_cds: {target} ({target.stat().st_size / 1e6:.0f} MB)")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 scripts/spark_cds.py VENV")
        return 2
    return build(Path(argv[0]).absolute())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
