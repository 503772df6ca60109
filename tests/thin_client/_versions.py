"""``python -m tests.thin_client._versions REMOTE``: the client's and the Connect server's release.

A module run with ``-m``, not ``python -c``: pyspark-client 4.2 takes a ``__main__`` with
neither ``__file__`` nor ``__spec__`` (``-c``, an xdist worker) for its own doctest run,
and exits looking for a SPARK_HOME it does not have.
"""

from __future__ import annotations

import json
import sys

import pyspark
from pyspark.sql import SparkSession

if __name__ == "__main__":
    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    try:
        print("RESULT " + json.dumps({"client": pyspark.__version__, "server": spark.version}))
    finally:
        spark.stop()
