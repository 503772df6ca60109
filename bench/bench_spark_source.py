"""Spark ``jetstream`` source vs a plain nats-py pull-fetch loop, reading 1M 128-byte messages.

Cases (group ``spark-source``, unit rows/s):

* ``nats-py pull fetch loop`` (baseline): one process, an ephemeral pull
  consumer with ``ack_policy none``, ``fetch(1000)`` until the whole stream is read.
* ``spark jetstream source local[2]`` (default ``readMethod=consumer``) and the same
  with ``readMethod=direct`` (batched direct get): ``spark.read.format("jetstream")`` then
  ``count`` and ``sum(length(data))`` in one job, timed without session start-up
  (a 20k-message warm-up read first starts the Python workers).

Env: ``BENCH_SPARK_SOURCE_MESSAGES`` (default 1,000,000).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PAYLOAD_128, fresh_server, report
from bench._cpu import CpuSampler

from oncestream import Connection, ConnectOptions, connect
from oncestream.streams import StreamSpec, ensure_stream

GROUP = "spark-source"
MESSAGES = int(os.environ.get("BENCH_SPARK_SOURCE_MESSAGES", "1000000"))
STREAM = "BENCH"


async def _count(conn: Connection) -> int:
    info = await conn.stream_info(STREAM)
    return int(info["state"]["messages"])


async def fill(url: str) -> None:
    """Publish MESSAGES 128-byte messages with core-NATS publishes and wait until stored."""
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name=STREAM, subjects=("bench.>",)))
        nc = conn.nc
        sent = 0
        # Core publishes are not flow controlled by JetStream: flush in chunks and top up
        # whatever the server did not store (bounded rounds).
        for _ in range(20):
            missing = MESSAGES - await _count(conn)
            if missing <= 0:
                break
            for i in range(missing):
                await nc.publish("bench.data", PAYLOAD_128)
                if i % 5000 == 4999:
                    await nc.flush()
            await nc.flush()
            sent += missing
            previous = -1
            for _ in range(200):
                stored = await _count(conn)
                if stored >= MESSAGES or stored == previous:
                    break
                previous = stored
                await asyncio.sleep(0.1)
        stored = await _count(conn)
        if stored != MESSAGES:
            raise SystemExit(f"stream holds {stored} messages, wanted {MESSAGES}")


async def pull_fetch_loop(url: str) -> float:
    """Baseline: single-process nats-py pull consumer, fetch(1000), no acks."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        "bench.>",
        stream=STREAM,
        config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL),
    )
    received = 0
    total = 0
    started = time.perf_counter()
    while received < MESSAGES:
        msgs = await sub.fetch(1000, timeout=5)
        for msg in msgs:
            total += len(msg.data)
        received += len(msgs)
    elapsed = time.perf_counter() - started
    await nc.close()
    assert total == MESSAGES * len(PAYLOAD_128)
    return MESSAGES / elapsed


def spark_read(
    url: str,
    n: int = MESSAGES,
    *,
    stream: str = STREAM,
    methods: tuple[str, ...] = ("consumer", "direct"),
    conf: dict[str, str] | None = None,
    cpu: dict[str, float] | None = None,
    server_pid: int | None = None,
) -> dict[str, tuple[float, float]]:
    """Rows/s and seconds of reading ``n`` messages, per readMethod (consumer = default).

    ``cpu``: filled with the CPU seconds per role of the first method's timed
    read (the server's too when its pid is ``server_pid``).
    """
    from pyspark.sql import functions as F

    from oncestream.spark import local_session

    spark = local_session("bench-spark-source", master="local[2]", conf=conf)
    results: dict[str, tuple[float, float]] = {}
    try:
        options = {"servers": url, "stream": stream}
        # Warm-up (part of session start-up, not of the read): spawn the Python workers,
        # import pyarrow/oncestream there and open their NATS connections.
        warm_n = min(20000, n)
        warm = spark.read.format("jetstream").options(
            endingOffsets=json.dumps({stream: warm_n + 1}), minPartitions="2", **options
        )
        assert warm.load().agg(F.sum(F.length("data"))).collect()[0][0] == warm_n * 128
        for method in methods:
            df = spark.read.format("jetstream").options(readMethod=method, **options).load()
            sampler = CpuSampler(also=(server_pid,) if server_pid else ()).start()
            started = time.perf_counter()
            row = df.agg(F.count("*").alias("n"), F.sum(F.length("data")).alias("b")).collect()[0]
            elapsed = time.perf_counter() - started
            used = sampler.stop()
            if cpu is not None and not results:
                cpu.update(used)
            assert row["n"] == n, row
            assert row["b"] == n * len(PAYLOAD_128), row
            results[method] = (n / elapsed, elapsed)
        return results
    finally:
        spark.stop()


def main() -> None:
    server = fresh_server()
    try:
        asyncio.run(fill(server.url))
        baseline = asyncio.run(pull_fetch_loop(server.url))
        report(
            GROUP, "nats-py pull fetch loop", baseline, "rows/s", baseline=True, messages=MESSAGES
        )
        for method, (rate, seconds) in spark_read(server.url).items():
            case = "spark jetstream source local[2]"
            report(
                GROUP,
                case if method == "consumer" else f"{case} readMethod=direct",
                rate,
                "rows/s",
                messages=MESSAGES,
                seconds=round(seconds, 2),
            )
    finally:
        server.close()


if __name__ == "__main__":
    main()
