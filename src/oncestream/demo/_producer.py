"""The demo's producer: orders through the Publisher, with re-sends and a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .._connection import connect
from .._options import ConnectOptions
from ..publish import Publisher, PublisherOptions
from ._workload import Expected, order_stream

__all__ = ["ProducerReport", "produce"]


@dataclass
class ProducerReport:
    """What the producer did."""

    orders: int = 0
    sent: int = 0
    duplicates_dropped: int = 0
    resent_on_purpose: int = 0
    replayed_after_restart: int = 0
    #: Extra attempts the Publisher made itself (an ack timeout, a reconnect).
    retried_by_publisher: int = 0
    restarts: int = 0
    seconds: float = 0.0


async def produce(
    options: ConnectOptions,
    stream: str,
    count: int,
    expected: Expected,
    *,
    duplicate_every: int = 50,
    restart_at: float = 0.6,
    replay: int = 2000,
    rate: float | None = None,
    progress: Callable[[int], None] | None = None,
    first_slice: int = 0,
    gate: Callable[[], Awaitable[None]] | None = None,
) -> ProducerReport:
    """Publish ``count`` orders to ``stream`` exactly once, despite the faults it plants.

    Every ``duplicate_every``-th order is sent twice (a client retry); at
    ``restart_at`` of the way the producer stops, reconnects and
    re-publishes the last ``replay`` orders, as a producer resuming from a
    checkpoint taken a little earlier would.
    The msg id is the order id, so the stream stores each order once.
    ``rate`` paces the orders (per second) like a live source; None sends
    them as fast as the Publisher can. After the first ``first_slice`` orders
    the producer awaits ``gate()`` (the demo opens it once the pipeline has
    produced output, so start-up time is not counted as latency).
    """
    report = ProducerReport()
    loop = asyncio.get_running_loop()
    started = loop.time()
    # The summary counts the re-sends the server dropped: only the ack path reports that
    # per message (a fast-ingest flow ack confirms a range), so the producer stays on it.
    popts = PublisherOptions(stream=stream, max_inflight=4000, ingest="acks")
    restart_after = int(count * restart_at)
    recent: list[tuple[str, str, bytes]] = []
    conn = await connect(options.replace(name="oncestream-demo-producer"))
    pub = Publisher(conn, popts)
    await pub.start()
    try:
        for n, (order_id, region, body, amount) in enumerate(order_stream(count)):
            subject = f"orders.{region}"
            await pub.publish(subject, body, msg_id=order_id)
            report.sent += 1
            expected.add(region, amount)
            if n % duplicate_every == 0:
                await pub.publish(subject, body, msg_id=order_id)
                report.sent += 1
                report.resent_on_purpose += 1
            recent.append((order_id, subject, body))
            if len(recent) > replay:
                del recent[: len(recent) - replay]
            if n + 1 == restart_after:
                # Restart: the new process resumes from a checkpoint `replay` orders back.
                await pub.close()
                report.duplicates_dropped += pub.stats.duplicates
                report.retried_by_publisher += pub.stats.retried
                await conn.close()
                conn = await connect(options.replace(name="oncestream-demo-producer"))
                pub = Publisher(conn, popts)
                await pub.start()
                report.restarts += 1
                for rid, rsubject, rbody in recent:
                    await pub.publish(rsubject, rbody, msg_id=rid)
                    report.sent += 1
                    report.replayed_after_restart += 1
            if n + 1 == first_slice and gate is not None:
                await pub.flush()
                await gate()
                started = loop.time() - (n + 1) / rate if rate else started
            if n % 1000 == 999:
                if progress is not None:
                    progress(n + 1)
                if rate is not None:
                    ahead = started + (n + 1) / rate - loop.time()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
        await pub.flush()
        report.duplicates_dropped += pub.stats.duplicates
        report.retried_by_publisher += pub.stats.retried
    finally:
        try:
            await pub.close()
        finally:
            await conn.close()
    report.orders = count
    report.seconds = loop.time() - started
    if progress is not None:
        progress(count)
    return report
