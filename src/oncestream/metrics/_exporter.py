"""Prometheus metrics for a :class:`~oncestream.Processor` or :class:`~oncestream.Publisher`.

Counters are read from the object's stats when Prometheus scrapes, latency
histograms are fed by the Processor as it works, and the consumer's pending
and ack-pending counts are asked from the server at scrape time. Every metric
is listed in docs/metrics.md.

Example::

    processor = Processor(conn, "ORDERS", "billing", handle, ledger=SQLiteLedger("b.db"))
    metrics = instrument(processor)            # default registry
    server = serve_metrics(9464)               # http://127.0.0.1:9464/metrics
    try:
        await processor.run()
    finally:
        metrics.close()
        server.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .._errors import ConfigError
from .._histogram import Histogram
from ..process import Processor
from ..publish import Publisher

__all__ = ["LATENCY_BUCKETS", "Instrumentation", "MetricsServer", "instrument", "serve_metrics"]

log = logging.getLogger(__name__)

#: Seconds; from a fast SQLite handler call to a slow batch.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip

_PROCESSOR_COUNTERS = (
    ("applied", "applied", "Messages whose handler ran and committed with their ledger row."),
    (
        "duplicates_suppressed",
        "suppressed",
        "Redeliveries found in the ledger and acked without applying them again.",
    ),
    ("failed", "failed", "Handler failures (each attempt counts)."),
    ("dead_lettered", "dead_lettered", "Messages moved to the dead-letter stream."),
    ("in_progress_acks", "in_progress_acks", "In-progress acks (+WPI) sent for slow batches."),
    ("batches", "batches", "Batches committed (one ledger transaction each)."),
    ("ledger_errors", "ledger_errors", "Ledger transactions that failed and were retried."),
    (
        "late_acks",
        "late_acks",
        "Redeliveries (delivery count > 1) of messages already applied: an ack the server "
        "took too late or never got; suppressed by the ledger.",
    ),
    (
        "max_deliver_exhausted",
        "exhausted",
        "Messages the server stopped delivering at the consumer's max_deliver, or handed "
        "back and then passed by its ack floor (then dead-lettered from the stream, or "
        "found applied, or the run failed).",
    ),
    ("takeovers", "takeovers", "Times this instance became the active one of a pinned group."),
    ("demotions", "demotions", "Times it stopped being the active one (the pin moved on)."),
    (
        "takeover_lock_waits",
        "takeover_lock_waits",
        "Takeover attempts that found the ledger locked by another process (the old active "
        "instance frozen inside a batch, or busy); the standby keeps trying.",
    ),
    (
        "reclaimed",
        "reclaimed",
        "Messages a gone instance held unacknowledged, taken back at start (consumer reset "
        "to its ack floor).",
    ),
)
_PUBLISHER_COUNTERS = (
    ("sent", "Messages handed to the Publisher."),
    ("acked", "Messages whose PubAck arrived."),
    ("duplicates", "PubAcks that reported an already stored msg id (de-duplicated)."),
    ("retried", "Extra publish attempts."),
    ("failed", "Messages that failed after all retries."),
)
#: Counters start at 0 with each process, as Prometheus counters do; the
#: ledger's all-time total is ``oncestream status --ledger`` (docs/metrics.md).
_PER_PROCESS = " Counted by this process since it started."
_HISTOGRAMS = {
    "batch": ("batch_duration_seconds", "Time to apply, commit and ack one pulled batch."),
    "handler": ("handler_duration_seconds", "Time of one handler call."),
    "commit": ("ledger_commit_duration_seconds", "Time of one ledger transaction commit."),
}


@dataclass
class _ConsumerState:
    pending: float = float("nan")
    ack_pending: float = float("nan")
    redelivered: float = float("nan")
    ack_floor: float = float("nan")
    last_seq: float = float("nan")


class Instrumentation:
    """Metrics of one Processor or Publisher in a registry; :meth:`close` removes them."""

    def __init__(self, target: Processor | Publisher, collector: _Collector) -> None:
        self.target = target
        self._collector = collector
        self.histograms = {kind: Histogram(LATENCY_BUCKETS) for kind in _HISTOGRAMS}
        self.consumer = _ConsumerState()
        #: Publisher: seconds from a message's last send to its PubAck.
        self.ack_histogram = Histogram(LATENCY_BUCKETS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        if isinstance(target, Publisher):
            target.ack_observer = self.ack_histogram.observe
        if isinstance(target, Processor):
            target.stats.observers.append(self._observe)
            try:
                self._loop = asyncio.get_running_loop()
                self._loop_thread = threading.get_ident()
            except RuntimeError:
                pass

    def _observe(self, kind: str, seconds: float) -> None:
        histogram = self.histograms.get(kind)
        if histogram is not None:
            histogram.observe(seconds)

    async def refresh(self) -> None:
        """Ask the server for the consumer's pending and ack-pending counts now."""
        target = self.target
        if not isinstance(target, Processor) or target.conn is None:
            return
        if self._loop is None:
            self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        info = await target.conn.consumer_info(target.stream, target.consumer)
        state = _ConsumerState(
            pending=float(info.get("num_pending", 0)),
            ack_pending=float(info.get("num_ack_pending", 0)),
            redelivered=float(info.get("num_redelivered", 0)),
            ack_floor=float(info.get("ack_floor", {}).get("stream_seq", 0)),
            last_seq=float(
                info.get("delivered", {}).get("stream_seq", 0) + info.get("num_pending", 0)
            ),
        )
        self.consumer = state

    def _refresh_for_scrape(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or threading.get_ident() == self._loop_thread:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.refresh(), loop).result(timeout=2.0)
        except Exception as exc:  # the last known values are served
            log.debug("consumer state not refreshed for a scrape: %s", exc)

    def close(self) -> None:
        """Stop reporting this target's metrics."""
        if isinstance(self.target, Processor):
            with contextlib.suppress(ValueError):
                self.target.stats.observers.remove(self._observe)
        if isinstance(self.target, Publisher) and (
            self.target.ack_observer == self.ack_histogram.observe
        ):
            self.target.ack_observer = None
        self._collector.remove(self)


class _Collector:
    """One per registry: every instrumented target's metrics under one set of families."""

    def __init__(self) -> None:
        self.targets: list[Instrumentation] = []
        self._lock = threading.Lock()

    def remove(self, item: Instrumentation) -> None:
        with self._lock:
            if item in self.targets:
                self.targets.remove(item)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            targets = list(self.targets)
        processors = [t for t in targets if isinstance(t.target, Processor)]
        publishers = [t for t in targets if isinstance(t.target, Publisher)]
        for item in processors:
            item._refresh_for_scrape()
        labels = ["stream", "consumer"]
        for name, attr, doc in _PROCESSOR_COUNTERS:
            family = CounterMetricFamily(
                f"oncestream_processor_{name}", doc + _PER_PROCESS, labels=labels
            )
            for item in processors:
                proc = item.target
                assert isinstance(proc, Processor)
                family.add_metric([proc.stream, proc.consumer], getattr(proc.stats, attr))
            yield family
        for kind, (name, doc) in _HISTOGRAMS.items():
            hist = HistogramMetricFamily(f"oncestream_processor_{name}", doc, labels=labels)
            for item in processors:
                proc = item.target
                assert isinstance(proc, Processor)
                buckets, total = item.histograms[kind].cumulative()
                hist.add_metric([proc.stream, proc.consumer], buckets, total)
            yield hist
        gauges = (
            ("pending_messages", "pending", "Messages not yet delivered to the consumer."),
            ("ack_pending_messages", "ack_pending", "Delivered messages not yet acked."),
            ("redelivered_messages", "redelivered", "Messages delivered more than once, unacked."),
            ("ack_floor_sequence", "ack_floor", "Stream sequence below which all is acked."),
        )
        for name, attr, doc in gauges:
            gauge = GaugeMetricFamily(f"oncestream_consumer_{name}", doc, labels=labels)
            for item in processors:
                proc = item.target
                assert isinstance(proc, Processor)
                gauge.add_metric([proc.stream, proc.consumer], getattr(item.consumer, attr))
            yield gauge
        waiting = GaugeMetricFamily(
            "oncestream_processor_takeover_wait_seconds",
            "Seconds this instance has held the pin without being able to take over (the "
            "ledger locked by another process); 0 when not waiting.",
            labels=labels,
        )
        now = time.monotonic()
        for item in processors:
            proc = item.target
            assert isinstance(proc, Processor)
            since = proc.takeover_waiting_since
            waiting.add_metric([proc.stream, proc.consumer], now - since if since else 0.0)
        yield waiting
        for name, doc in _PUBLISHER_COUNTERS:
            family = CounterMetricFamily(
                f"oncestream_publisher_{name}", doc + _PER_PROCESS, labels=["stream"]
            )
            for item in publishers:
                pub = item.target
                assert isinstance(pub, Publisher)
                family.add_metric([_publisher_stream(pub)], getattr(pub.stats, name))
            yield family
        inflight = GaugeMetricFamily(
            "oncestream_publisher_inflight_messages",
            "Messages sent whose PubAck has not arrived yet.",
            labels=["stream"],
        )
        for item in publishers:
            pub = item.target
            assert isinstance(pub, Publisher)
            inflight.add_metric([_publisher_stream(pub)], float(pub.inflight))
        yield inflight
        acks = HistogramMetricFamily(
            "oncestream_publisher_ack_duration_seconds",
            "Time from a message's last send to its PubAck.",
            labels=["stream"],
        )
        for item in publishers:
            pub = item.target
            assert isinstance(pub, Publisher)
            buckets, total = item.ack_histogram.cumulative()
            acks.add_metric([_publisher_stream(pub)], buckets, total)
        yield acks


def _publisher_stream(pub: Publisher) -> str:
    return str(pub.options.stream or "")


_COLLECTORS: dict[int, _Collector] = {}
_COLLECTORS_LOCK = threading.Lock()


def instrument(
    target: Processor | Publisher, registry: CollectorRegistry = REGISTRY
) -> Instrumentation:
    """Export ``target``'s metrics through ``registry`` (the default one unless given).

    Call it from the event loop that runs the Processor (so the consumer's
    pending counts can be asked for at scrape time) before or after ``run()``.

    Raises:
        ConfigError: ``target`` is neither a Processor nor a Publisher.
    """
    if not isinstance(target, Processor | Publisher):
        raise ConfigError(f"instrument() takes a Processor or a Publisher, got {target!r}")
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(id(registry))
        if collector is None:
            collector = _Collector()
            registry.register(collector)
            _COLLECTORS[id(registry)] = collector
    item = Instrumentation(target, collector)
    with collector._lock:
        collector.targets.append(item)
    return item


class MetricsServer:
    """The HTTP endpoint serving ``/metrics``; :attr:`port` is the bound port."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host, self.port = server.server_address[:2]

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(
    port: int, host: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY
) -> MetricsServer:
    """Serve ``registry`` on ``http://host:port/metrics`` from a daemon thread (port 0 = any).

    Raises:
        ConfigError: the port is out of range or cannot be bound (naming host and port).
    """
    if not 0 <= port <= 65535:
        raise ConfigError(f"metrics port must be 0..65535, got {port}")
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    return MetricsServer(server, thread)
