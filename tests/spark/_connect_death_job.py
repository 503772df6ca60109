"""A Connect client waiting in ``awaitTermination()`` while its server dies (run as a script).

``python -m tests.spark._connect_death_job <sc://url> <retries> <ready-file> [<timeout>]``:
starts a streaming query (rate -> noop), with pyspark's retry policy bounded as
docs/deploy.md shows when ``<retries>`` is a number (``default``: pyspark's own),
writes ``<ready-file>`` once the query runs, then waits in ``awaitTermination()``
(with ``<timeout>`` seconds when given)
and prints ``RESULT {"seconds": s, "error": "..."}``: how long after the ready
file the call returned or raised (the test kills the server right after it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(remote: str, retries: str, ready: str, timeout: str = "") -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    if retries != "default":
        # docs/deploy.md, "When the Connect server dies": the snippet there.
        from pyspark.sql.connect.client.retries import DefaultPolicy

        spark.client.set_retry_policies([DefaultPolicy(max_retries=int(retries))])
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    Path(ready).write_text(str(query.id))
    started = time.monotonic()
    error = ""
    try:
        query.awaitTermination(float(timeout)) if timeout else query.awaitTermination()
    except Exception as exc:  # what the caller sees once the retries are spent
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    seconds = round(time.monotonic() - started, 1)
    print("RESULT " + json.dumps({"seconds": seconds, "error": error}), flush=True)


if __name__ == "__main__":
    from tests._spark_start import install  # Spark's 10 s connect-back, met by a restart

    install()
    main(*sys.argv[1:5])
