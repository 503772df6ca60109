"""Arrow columns in one process: ``Publisher.publish_columns`` against ``publish_many`` of lists.

Group "columns": the rows the Spark sink's Python worker gets (Arrow batches
of 10,000 rows: one subject, 128-byte payloads, a unique msg id each) published
on the fast-ingest path, as the sink did before (``to_pylist`` of each column,
then ``publish_many`` with an ``AckTally``; the baseline) and as it does now
(``publish_columns``). Same fresh server, a fresh ``allow_batched`` stream per
case, best of BENCH_COLUMNS_REPEATS (2). Each result carries this process's CPU
microseconds per row (the server runs in another process): the client cost
the change cuts. Size: BENCH_COLUMNS_ROWS (1,000,000).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from bench._common import PAYLOAD_128, fresh_server, report

from oncestream import ConnectOptions, connect
from oncestream.publish import AckTally, Publisher, PublisherOptions
from oncestream.streams import StreamSpec, delete_stream, ensure_stream

ROWS = int(os.environ.get("BENCH_COLUMNS_ROWS", "1000000"))
REPEATS = int(os.environ.get("BENCH_COLUMNS_REPEATS", "2"))
BATCH = 10_000  # Spark's spark.sql.execution.arrow.maxRecordsPerBatch default


def _batches(prefix: str) -> list[tuple[pa.Array, pa.Array]]:
    data = pa.array([PAYLOAD_128] * BATCH, pa.binary())
    return [
        (data, pa.array([f"{prefix}{i}" for i in range(start, min(start + BATCH, ROWS))]))
        for start in range(0, ROWS, BATCH)
    ]


async def _run(url: str, columns: bool, prefix: str) -> tuple[float, float]:
    """(rows/s, client CPU µs per row) of one case into a fresh stream."""
    batches = _batches(prefix)  # built before the clock starts: Spark hands them over
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        try:
            await delete_stream(conn, "BCOLS")
        except Exception:
            pass
        await ensure_stream(
            conn, StreamSpec(name="BCOLS", subjects=("bcols.>",), allow_batched=True)
        )
        tally = AckTally()
        pub = Publisher(conn, PublisherOptions(stream="BCOLS", ingest="fast"))
        await pub.start()
        cpu, start = time.process_time(), time.perf_counter()
        for data, ids in batches:
            if columns:
                await pub.publish_columns("bcols.x", data, ids, tally=tally)
            else:
                n = len(ids)
                await pub.publish_many(
                    ["bcols.x"] * n, data.slice(0, n).to_pylist(), ids.to_pylist(), tally=tally
                )
        await pub.flush()
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
        await pub.close()
        stored = (await conn.stream_info("BCOLS"))["state"]["messages"]
    assert tally.stored == ROWS == stored and not tally.errors, (tally.stored, stored)
    return ROWS / elapsed, used / ROWS * 1e6


def main() -> None:
    server = fresh_server()
    try:
        results = {}
        for columns in (False, True):
            runs = [asyncio.run(_run(server.url, columns, f"r{k}-")) for k in range(REPEATS)]
            results[columns] = max(runs)  # the fastest round, and its CPU
        base_rate, base_cpu = results[False]
        report(
            "columns",
            "publish_many of column lists (the sink before)",
            base_rate,
            "rows/s",
            baseline=True,
            n=ROWS,
            client_cpu_us_per_row=round(base_cpu, 2),
        )
        rate, cpu = results[True]
        report(
            "columns",
            "publish_columns (Arrow frames, runs)",
            rate,
            "rows/s",
            n=ROWS,
            ratio=round(rate / base_rate, 3),
            client_cpu_us_per_row=round(cpu, 2),
            cpu_ratio=round(cpu / base_cpu, 3),
        )
    finally:
        server.close()


if __name__ == "__main__":
    main()
