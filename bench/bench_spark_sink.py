"""Spark sink throughput versus the Publisher in one process, plus the demo's end-to-end figures.

Group "spark-sink": ``df.write.format("jetstream")`` of 1M 128-byte rows with
a ``msg_id`` column on local[2] (two tasks, each with its own Publisher),
against the single-process Publisher rate measured in the same run on the
same server (baseline). Group "demo": ``oncestream demo --json`` at its
default size (orders/s end to end; latency percentiles and wall time as
extra keys). Sizes: BENCH_SINK_ROWS, BENCH_SINK_BASELINE, BENCH_DEMO_MESSAGES
(0 skips the demo); BENCH_SINK_PARTITIONS (tasks, default 2) and
BENCH_SINK_ARROW_BATCH (``spark.sql.execution.arrow.maxRecordsPerBatch``, default
Spark's 10,000), BENCH_SINK_REPEATS (timed writes, the fastest counts; default 2).
Each result also carries CPU microseconds per row by
role (nats-server, Spark JVM, Spark's Python workers, this process): on a loaded
machine the wall-clock ratio swings, the CPU per row does not.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PAYLOAD_128, fresh_server, report
from bench._cpu import CpuSampler
from bench.bench_publish import measure_publisher

from oncestream import ConnectOptions, connect
from oncestream.streams import StreamSpec, delete_stream, ensure_stream

ROWS = int(os.environ.get("BENCH_SINK_ROWS", "1000000"))
BASELINE = int(os.environ.get("BENCH_SINK_BASELINE", "300000"))
DEMO = int(os.environ.get("BENCH_DEMO_MESSAGES", "200000"))
PARTITIONS = int(os.environ.get("BENCH_SINK_PARTITIONS", "2"))
REPEATS = int(os.environ.get("BENCH_SINK_REPEATS", "2"))  # timed writes, the best counts
WARM_WRITES = int(os.environ.get("BENCH_SINK_WARM_WRITES", "3"))  # of 100,000 rows
ARROW_BATCH = os.environ.get("BENCH_SINK_ARROW_BATCH", "")  # "": Spark's default, 10,000


async def _stream(url: str, name: str, delete: bool = True, spec: StreamSpec | None = None) -> int:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        if delete:
            try:
                await delete_stream(conn, name)
            except Exception:
                pass
            await ensure_stream(
                conn, spec or StreamSpec(name=name, subjects=(f"{name.lower()}.>",))
            )
        return int((await conn.stream_info(name))["state"]["messages"])


def sink_rate(
    url: str,
    rows: int = ROWS,
    *,
    stream: str = "BSINK",
    partitions: int = PARTITIONS,
    conf: dict[str, str] | None = None,
    spec: StreamSpec | None = None,
    cpu: dict[str, float] | None = None,
    repeats: int = 1,
    ingest: str = "auto",
    server_pid: int | None = None,
) -> float:
    """Rows/s of ``df.write.format("jetstream")`` of ``rows`` 128-byte rows (after a warm-up).

    ``repeats``: timed writes (each into a fresh stream); the fastest counts.
    ``cpu``: filled with the CPU seconds per role of the counted write (the
    server's too when it runs in this process tree, or its pid is ``server_pid``).
    """
    from pyspark.sql import functions as F

    from oncestream.spark import local_session

    if ARROW_BATCH:
        conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": ARROW_BATCH, **(conf or {})}
    spark = local_session("bench-spark-sink", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:

        def frame(n: int, prefix: str) -> object:
            # The payload the Publisher and nats.go publish: one 128-byte value, a unique
            # msg id per row. (Rows padded from their id cost the JVM 0.6-0.9 µs a row
            # more, building the input rather than writing it.)
            return spark.range(0, n, numPartitions=partitions).select(
                F.lit(f"{stream.lower()}.x").alias("subject"),
                F.lit(PAYLOAD_128).alias("data"),
                F.concat(F.lit(prefix), F.col("id").cast("string")).alias("msg_id"),
            )

        def write(df: object) -> None:
            df.write.format("jetstream").option("servers", url).option(  # type: ignore[attr-defined]
                "stream", stream
            ).option("ingest", ingest).mode("append").save()

        asyncio.run(_stream(url, stream, spec=spec))
        # Start and import the Python workers, and let the JVM compile the write path
        # (a short warm-up left JIT and first-write costs in the timed write).
        for i in range(WARM_WRITES):
            write(frame(100_000, f"warm{i}-"))
        best = 0.0
        for attempt in range(max(1, repeats)):
            asyncio.run(_stream(url, stream, spec=spec))
            df = frame(rows, f"r{attempt}-")
            sampler = CpuSampler(also=(server_pid,) if server_pid else ()).start()
            start = time.perf_counter()
            write(df)
            elapsed = time.perf_counter() - start
            used = sampler.stop()
            stored = asyncio.run(_stream(url, stream, delete=False))
            assert stored == rows, f"stored {stored} of {rows}"
            if rows / elapsed > best:
                best = rows / elapsed
                if cpu is not None:
                    cpu.clear()
                    cpu.update(used)
        return best
    finally:
        spark.stop()


def _per_row(cpu: dict[str, float], n: int) -> dict[str, float]:
    return {role: round(seconds / n * 1e6, 2) for role, seconds in cpu.items() if seconds}


def _demo() -> dict[str, object]:
    cli = Path(sys.executable).with_name("oncestream")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", COLUMNS="100")
    proc = subprocess.run(
        [str(cli), "demo", "--messages", str(DEMO), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DEMO-JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"demo failed (exit {proc.returncode}): {proc.stdout[-2000:]}")
    return dict(json.loads(line.removeprefix("DEMO-JSON ")))


def main() -> None:
    server = fresh_server()
    try:
        base, base_cpu = 0.0, {}
        for _ in range(max(1, REPEATS)):  # the same best-of as the sink's, so the ratio is fair
            sampler = CpuSampler().start()
            rate = measure_publisher(server.url, BASELINE, stream="BPUBSINK")
            used = _per_row(sampler.stop(), BASELINE)
            if rate > base:
                base, base_cpu = rate, used
        report(
            "spark-sink",
            "Publisher, one process",
            base,
            baseline=True,
            n=BASELINE,
            repeats=REPEATS,
            cpu_us_per_row=base_cpu,
        )
        cpu: dict[str, float] = {}
        rate = sink_rate(server.url, cpu=cpu, repeats=REPEATS)
        sink_cpu = _per_row(cpu, ROWS)
        report(
            "spark-sink",
            f"jetstream sink, local[2], {PARTITIONS} tasks",
            rate,
            "rows/s",
            n=ROWS,
            ratio=round(rate / base, 3),
            partitions=PARTITIONS,
            repeats=REPEATS,
            arrow_batch=int(ARROW_BATCH or 10_000),
            cpu_us_per_row=sink_cpu,
            cpu_ratio=round(sum(sink_cpu.values()) / max(sum(base_cpu.values()), 1e-9), 3),
        )
    finally:
        server.close()
    if DEMO:
        summary = _demo()
        latency = summary.get("latency_ms") or {}
        report(
            "demo",
            f"oncestream demo ({DEMO:,} orders, end to end)",
            float(summary["orders_per_second"]),  # type: ignore[arg-type]
            "orders/s",
            latency_p50_ms=latency.get("p50"),  # type: ignore[union-attr]
            latency_p99_ms=latency.get("p99"),  # type: ignore[union-attr]
            total_seconds=summary["total_seconds"],
            pipeline_seconds=summary["pipeline_seconds"],
            missing=summary["enriched"]["missing"],  # type: ignore[index]
            duplicated=summary["enriched"]["duplicated"],  # type: ignore[index]
        )


if __name__ == "__main__":
    main()
