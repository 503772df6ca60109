"""Publish throughput: nats-py one-at-a-time and publish_async versus the oncestream Publisher.

Same run, same fresh file-storage server, 128-byte payloads, a unique msg id
per message and a fresh stream per case. Prints RESULT lines (group
"publish") for bench/run.py. ``measure_publisher(url, n)`` is reusable by
other benchmarks (e.g. the Spark sink's).

Group "publish-atomic": an AtomicPublisher into a fresh stream with
``allow_atomic``, then the same ids again at once (a re-run: every batch is
refused, 10201, and its ids are found stored), each stored once (issue 38).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats
from bench._common import PAYLOAD_128, fresh_server, report

from oncestream import ConnectOptions, connect
from oncestream.publish import AtomicPublisher, Publisher, PublisherOptions
from oncestream.streams import StreamSpec, delete_stream, ensure_stream

N_SYNC = int(os.environ.get("BENCH_PUBLISH_SYNC", "20000"))
N_ASYNC = int(os.environ.get("BENCH_PUBLISH_ASYNC", "200000"))
N_PUBLISHER = int(os.environ.get("BENCH_PUBLISH_PUBLISHER", "300000"))
N_ATOMIC = int(os.environ.get("BENCH_PUBLISH_ATOMIC", "100000"))


async def _fresh_stream(url: str, name: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        try:
            await delete_stream(conn, name)
        except Exception:
            pass
        await ensure_stream(conn, StreamSpec(name=name, subjects=(f"{name.lower()}.>",)))


async def _stored(url: str, name: str) -> int:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        info = await conn.stream_info(name)
        return int(info["state"]["messages"])


async def _nats_py_sync(url: str, n: int) -> float:
    await _fresh_stream(url, "BSYNC")
    nc = await nats.connect(url)
    js = nc.jetstream()
    start = time.perf_counter()
    for i in range(n):
        await js.publish("bsync.x", PAYLOAD_128, headers={"Nats-Msg-Id": f"s-{i}"})
    elapsed = time.perf_counter() - start
    await nc.close()
    assert await _stored(url, "BSYNC") == n
    return n / elapsed


async def _nats_py_async(url: str, n: int) -> float:
    await _fresh_stream(url, "BASYNC")
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=5000)
    start = time.perf_counter()
    futures = []
    for i in range(n):
        fut = await js.publish_async("basync.x", PAYLOAD_128, headers={"Nats-Msg-Id": f"a-{i}"})
        futures.append(fut)
    await asyncio.gather(*futures)
    elapsed = time.perf_counter() - start
    await nc.close()
    assert await _stored(url, "BASYNC") == n
    return n / elapsed


async def measure_publisher_async(
    url: str,
    n: int,
    stream: str = "BPUB",
    *,
    fresh: bool = True,
    subject: str | None = None,
    ingest: str = "auto",
) -> float:
    """Publish ``n`` unique 128-byte messages with the Publisher; msg/s.

    ``fresh``: (re)create ``stream`` with the default spec first; False publishes into
    the existing stream (whose subjects must capture ``subject``, default ``<stream>.x``).
    ``ingest``: the Publisher's path (``"fast"`` needs a stream with allow_batched).
    """
    if fresh:
        await _fresh_stream(url, stream)
    subject = subject or f"{stream.lower()}.x"
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        pub = Publisher(conn, PublisherOptions(stream=stream, ingest=ingest))  # type: ignore[arg-type]
        await pub.start()
        start = time.perf_counter()
        for i in range(n):
            await pub.publish(subject, PAYLOAD_128, msg_id=f"p-{i}")
        await pub.flush()
        elapsed = time.perf_counter() - start
        await pub.close()
        stats = pub.stats
    assert stats.acked == n and stats.failed == 0, stats
    if fresh:
        assert await _stored(url, stream) == n
    return n / elapsed


async def measure_atomic_rerun(url: str, n: int, stream: str = "BATOMIC") -> tuple[float, float]:
    """``n`` rows through an AtomicPublisher, then the same ``n`` again: both in rows/s."""
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        spec = StreamSpec(name=stream, subjects=(f"{stream.lower()}.>",), allow_atomic=True)
        await ensure_stream(conn, spec)
        ids = [f"a-{i}" for i in range(n)]
        subjects, datas = [f"{stream.lower()}.x"] * n, [PAYLOAD_128] * n
        rates = []
        for _run in range(2):
            start = time.perf_counter()
            async with AtomicPublisher(conn, PublisherOptions(stream=stream)) as pub:
                await pub.publish(subjects, datas, ids)
            rates.append(n / (time.perf_counter() - start))
        stats = pub.stats
        stored = int((await conn.stream_info(stream))["state"]["messages"])
    assert (stats.stored, stats.duplicates, stored) == (0, n, n), (stats, stored)
    return rates[0], rates[1]


def measure_publisher(url: str, n: int, stream: str = "BPUB") -> float:
    """Synchronous wrapper of :func:`measure_publisher_async`."""
    return asyncio.run(measure_publisher_async(url, n, stream))


async def _main() -> None:
    server = fresh_server()
    try:
        url = server.url
        sync_rate = await _nats_py_sync(url, N_SYNC)
        report("publish", "nats-py js.publish (one at a time)", sync_rate, baseline=True, n=N_SYNC)
        async_rate = await _nats_py_async(url, N_ASYNC)
        report("publish", "nats-py js.publish_async", async_rate, baseline=True, n=N_ASYNC)
        pub_rate = await measure_publisher_async(url, N_PUBLISHER)
        report("publish", "oncestream Publisher", pub_rate, n=N_PUBLISHER)
        first, rerun = await measure_atomic_rerun(url, N_ATOMIC)
        report("publish-atomic", "AtomicPublisher, new ids", first, baseline=True, n=N_ATOMIC)
        report(
            "publish-atomic",
            "AtomicPublisher re-run at once (every id stored already)",
            rerun,
            n=N_ATOMIC,
        )
    finally:
        server.close()


if __name__ == "__main__":
    asyncio.run(_main())
