"""Prometheus metrics of a streaming query's ``jetstream`` source and sink, on the driver.

Spark runs the data source's own code in separate Python processes (the
executors' tasks, and the workers the JVM starts for planning and commits),
so nothing in the user's driver process sees the rows go by. What the driver
does see, and what this exporter reads at each Prometheus scrape:

- the query's progress reports (``query.recentProgress``): rows per micro-batch
  of every ``jetstream`` source, and how far behind each stream it planned from;
- with connect options, the server: the age of each stream's oldest unread
  message (lag in seconds), and the sink's committed-batch records (rows
  stored, re-sent and de-duplicated, skipped, micro-batches committed).

Needs the ``metrics`` extra (``prometheus-client``); importing this module does not.

Example::

    from oncestream.metrics import serve_metrics
    from oncestream.spark import instrument_query

    query = df.writeStream.format("jetstream")....start()
    metrics = instrument_query(query, options=ConnectOptions(servers=url))
    server = serve_metrics(9466)
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .._connection import Connection, connect
from .._errors import ConfigError, MessageNotFound, StreamNotFound
from .._histogram import Histogram
from .._options import ConnectOptions
from .._sync import SyncRunner
from ..read import iter_messages
from ..streams import get_message
from ._commits import COMMITS_STREAM, COMMITS_SUBJECT
from ._lag import _get, _offsets

__all__ = ["ROW_BUCKETS", "QueryInstrumentation", "instrument_query"]

log = logging.getLogger(__name__)

#: Rows per micro-batch.
ROW_BUCKETS: tuple[float, ...] = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)
#: How long a scrape waits for the server before serving the last known values.
SCRAPE_TIMEOUT = 2.0


@dataclass
class _SinkTotals:
    rows: int = 0
    duplicates: int = 0
    skipped: int = 0
    commits: int = 0


@dataclass
class _SourceBatch:
    key: tuple[str, int, str]
    streams: str
    rows: int


def source_batches(progress: list[Any]) -> list[_SourceBatch]:
    """Each ``jetstream`` source's rows in each micro-batch that read or advanced.

    Idle progress reports (no new data) are left out; ``streams`` names the
    source's streams, comma-separated. The key tells reports apart across scrapes.
    """
    out = []
    for report in progress:
        key = (
            str(_get(report, "runId") or ""),
            int(_get(report, "batchId") or 0),
            str(_get(report, "timestamp") or ""),
        )
        for index, source in enumerate(_get(report, "sources") or ()):
            end = _offsets(_get(source, "endOffset"))
            if not end:
                continue
            start = _offsets(_get(source, "startOffset"))
            rows = int(_get(source, "numInputRows") or 0)
            if rows == 0 and start == end:
                continue
            out.append(_SourceBatch((*key[:2], f"{key[2]}#{index}"), ",".join(sorted(end)), rows))
    return out


def source_positions(progress: Any) -> dict[str, tuple[int, int]]:
    """``{stream: (last read sequence, stream's last sequence when planned)}`` of a report."""
    out: dict[str, tuple[int, int]] = {}
    if progress is None:
        return out
    for source in _get(progress, "sources") or ():
        latest = _offsets(_get(source, "latestOffset"))
        end = _offsets(_get(source, "endOffset"))
        for stream, head in latest.items():
            out[stream] = (end.get(stream, 0), head)
    return out


class QueryInstrumentation:
    """A streaming query's metrics in a Prometheus registry; :meth:`close` removes them."""

    def __init__(
        self,
        query: Any,
        registry: Any,
        options: ConnectOptions | None,
        commits_stream: str,
        label: str,
    ) -> None:
        self.query = query
        self.label = label
        self.options = options
        self.commits_stream = commits_stream
        self._registry = registry
        self._lock = threading.Lock()
        self._seen: set[tuple[str, int, str]] = set()
        self.source_rows: dict[str, int] = {}
        self.batch_rows: dict[str, Histogram] = {}
        self.lag_messages: dict[str, float] = {}
        self.lag_seconds: dict[str, float] = {}
        self.sink: dict[str, _SinkTotals] = {}
        self._commits_next = 1
        self._last_batch = -1
        self._runner: SyncRunner | None = None
        self._conn: Connection | None = None
        registry.register(self)

    # -- what a scrape reads

    def _progress(self) -> tuple[list[Any], Any]:
        try:
            return list(self.query.recentProgress or ()), self.query.lastProgress
        except Exception as exc:  # a stopped session: the last known values are served
            log.debug("query progress not read for a scrape: %s", exc)
            return [], None

    def refresh(self) -> None:
        """Read the query's progress (and, with connect options, the server) now."""
        recent, last = self._progress()
        batches = source_batches(recent)
        keys = {b.key for b in batches}
        for batch in batches:
            if batch.key in self._seen:
                continue
            self.source_rows[batch.streams] = self.source_rows.get(batch.streams, 0) + batch.rows
            self.batch_rows.setdefault(batch.streams, Histogram(ROW_BUCKETS)).observe(batch.rows)
        self._seen = keys  # recentProgress is a sliding window: a report never comes back
        positions = source_positions(last)
        self.lag_messages = {s: float(max(h - e, 0)) for s, (e, h) in positions.items()}
        if self.options is None:
            self.lag_seconds = dict.fromkeys(positions, math.nan)
            return
        if self._runner is None:
            self._runner = SyncRunner()
        try:
            self._runner.run(self._ask_server(positions), timeout=SCRAPE_TIMEOUT)
        except Exception as exc:  # the last known values are served
            log.debug("server not asked for a scrape: %s", exc)

    async def _ask_server(self, positions: dict[str, tuple[int, int]]) -> None:
        if self._conn is None or self._conn.is_closed:
            assert self.options is not None
            self._conn = await connect(self.options)
        conn = self._conn
        now = datetime.now(UTC)
        seconds = {}
        for stream, (end, head) in positions.items():
            if head <= end:
                seconds[stream] = 0.0
                continue
            try:
                oldest = await get_message(conn, stream, seq=end + 1, next_by_subject=">")
            except (MessageNotFound, StreamNotFound):
                seconds[stream] = 0.0
                continue
            seconds[stream] = max((now - oldest.time).total_seconds(), 0.0)
        self.lag_seconds = seconds
        await self._read_commits(conn)

    async def _read_commits(self, conn: Connection) -> None:
        """Add the sink's commit records of this query stored since the last scrape."""
        query_id = str(getattr(self.query, "id", "") or "")
        subject = f"{COMMITS_SUBJECT}.{self.commits_stream.lower()}.>"
        try:
            info = await conn.stream_info(self.commits_stream)
        except StreamNotFound:
            return  # no sink has committed yet
        last = int(info.get("state", {}).get("last_seq", 0))
        if last < self._commits_next:
            return
        async for msg in iter_messages(
            conn, self.commits_stream, start_seq=self._commits_next, subject=subject, end_seq=last
        ):
            record = _commit_record(msg.data)
            if record is None or record.get("query_id") != query_id:
                continue
            batch = int(record.get("batch_id", -1))
            if batch <= self._last_batch:
                continue
            self._last_batch = batch
            totals = self.sink.setdefault(str(record.get("stream") or ""), _SinkTotals())
            totals.rows += int(record.get("written", 0))
            totals.duplicates += int(record.get("duplicates", 0))
            totals.skipped += int(record.get("skipped", 0))
            totals.commits += 1
        self._commits_next = last + 1

    # -- the Prometheus collector protocol

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        with self._lock:
            self.refresh()
        labels = ["query", "stream"]
        q = self.label
        gauges = (
            ("lag_messages", self.lag_messages, "Stream messages not yet read by the query."),
            ("lag_seconds", self.lag_seconds, "Age of the oldest message not yet read."),
        )
        for name, values, doc in gauges:
            gauge = GaugeMetricFamily(f"oncestream_spark_source_{name}", doc, labels=labels)
            for stream, value in sorted(values.items()):
                gauge.add_metric([q, stream], value)
            yield gauge
        rows = CounterMetricFamily(
            "oncestream_spark_source_rows", "Rows the source read.", labels=labels
        )
        for stream, count in sorted(self.source_rows.items()):
            rows.add_metric([q, stream], float(count))
        yield rows
        hist = HistogramMetricFamily(
            "oncestream_spark_source_batch_rows", "Rows per micro-batch.", labels=labels
        )
        for stream, histogram in sorted(self.batch_rows.items()):
            hist.add_metric([q, stream], *histogram.cumulative())
        yield hist
        counters = (
            ("rows", "rows", "Rows the sink stored (committed micro-batches)."),
            ("duplicate_rows", "duplicates", "Rows re-sent and dropped by the server as dups."),
            ("skipped_rows", "skipped", "Rows not re-sent: an earlier attempt had stored them."),
            ("commits", "commits", "Micro-batches the sink committed."),
        )
        for name, attr, doc in counters:
            family = CounterMetricFamily(f"oncestream_spark_sink_{name}", doc, labels=labels)
            for stream, totals in sorted(self.sink.items()):
                family.add_metric([q, stream], float(getattr(totals, attr)))
            yield family

    def close(self) -> None:
        """Stop reporting this query; closes the connection to the server."""
        self._registry.unregister(self)
        runner, self._runner = self._runner, None
        if runner is not None:
            conn = self._conn
            if conn is not None:
                try:
                    runner.run(conn.close(), timeout=5)
                except Exception as exc:
                    log.debug("closing the metrics connection: %s", exc)
            runner.close()


def _commit_record(data: bytes) -> Mapping[str, Any] | None:
    """A commit record's fields (attempt markers and foreign data: None)."""
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(fields, dict) or "written" not in fields or "tail_seq" not in fields:
        return None
    return fields


def instrument_query(
    query: Any,
    *,
    options: ConnectOptions | None = None,
    commits_stream: str = COMMITS_STREAM,
    registry: Any = None,
) -> QueryInstrumentation:
    """Export a streaming query's ``jetstream`` source and sink metrics (docs/metrics.md).

    Args:
        query: a ``StreamingQuery`` (classic or Spark Connect).
        options: how to reach the server; without them the source's lag in
            seconds is NaN and the sink's counters are not exported.
        commits_stream: the sink's ``commitsStream`` option, if it was changed.
        registry: a ``prometheus_client`` registry (default: the default one).

    Raises:
        ConfigError: ``query`` has no progress reports (not a streaming query),
            or ``prometheus-client`` is not installed.
    """
    if not hasattr(query, "recentProgress"):
        raise ConfigError(f"instrument_query() takes a StreamingQuery, got {query!r}")
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        raise ConfigError(
            "instrument_query() needs prometheus-client: pip install 'oncestream[metrics]'"
        ) from None
    label = str(getattr(query, "name", None) or getattr(query, "id", "") or "")
    return QueryInstrumentation(
        query, REGISTRY if registry is None else registry, options, commits_stream, label
    )
