"""JVM CPU a row of building the Spark sink benchmark's input, without writing it.

Writes 10^6 rows (``BENCH_INPUT_ROWS``) into Spark's ``noop`` sink twice per
input kind (the second, warm JVM, counts): ``padded``, the payload built per row
(``lpad`` of the row's id to 128 bytes, the sink cases' input until
2026-11-26), and ``literal``, one 128-byte value (the Publisher's and nats.go's
payload, the sink cases' input since). Both carry a msg id per row. Prints the
CPU microseconds a row per role (docs/benchmarks.md, "Follow-up run").

Run: ``SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/spark_input_cost.py``
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PAYLOAD_128
from bench._cpu import CpuSampler

ROWS = int(os.environ.get("BENCH_INPUT_ROWS", "1000000"))


def main() -> None:
    from pyspark.sql import functions as F

    from oncestream.spark import local_session

    spark = local_session("bench-spark-input-cost")
    spark.sparkContext.setLogLevel("ERROR")
    payloads = {
        "padded": F.expr("cast(lpad(cast(id as string), 128, 'x') as binary)"),
        "literal": F.lit(PAYLOAD_128),
    }
    try:
        for round_ in ("cold", "warm"):
            for kind, payload in payloads.items():
                df = spark.range(0, ROWS, numPartitions=2).select(
                    F.lit("bsink.x").alias("subject"),
                    payload.alias("data"),
                    F.concat(F.lit("r-"), F.col("id").cast("string")).alias("msg_id"),
                )
                sampler = CpuSampler().start()
                started = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                elapsed = time.perf_counter() - started
                used = sampler.stop()
                per_row = {role: round(s / ROWS * 1e6, 2) for role, s in used.items() if s}
                print(f"{round_} {kind}: {elapsed:.2f} s, CPU µs a row {per_row}", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
