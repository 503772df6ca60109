"""Prometheus gauges of streams as the server reports them, mirrors' and sources' lag included.

At each scrape the server is asked for the info of every watched stream (all
of them by default): its messages, bytes and last sequence, and for a stream
that mirrors or sources others (a hub sourcing leaf streams), how many
messages each upstream is behind and how long ago it was last heard from.

Example::

    async with await connect(options) as conn:
        watched = instrument_streams(conn)           # every stream, default registry
        server = serve_metrics(9465)
        ...
        watched.close()
        server.close()
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from .._connection import Connection
from .._errors import ConfigError, StreamNotFound
from ..streams import list_streams, stream_info
from ..streams._internal import upstream_rows

__all__ = ["StreamsInstrumentation", "instrument_streams"]

log = logging.getLogger(__name__)

#: How long a scrape waits for the server's answers before serving the last known ones.
SCRAPE_TIMEOUT = 2.0

_STREAM_GAUGES = (
    ("messages", "messages", "Messages stored in the stream."),
    ("bytes", "bytes", "Bytes stored in the stream."),
    ("last_sequence", "last_seq", "The stream's last sequence."),
)
_UPSTREAM_GAUGES = (
    ("lag_messages", "lag", "Messages of the upstream stream not yet copied into this one."),
    (
        "idle_seconds",
        "idle_seconds",
        "Seconds since this stream last heard from the upstream (NaN: never).",
    ),
)


class StreamsInstrumentation:
    """Gauges of the watched streams in a registry; :meth:`close` removes them."""

    def __init__(
        self,
        conn: Connection,
        streams: Sequence[str],
        registry: CollectorRegistry,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.conn = conn
        self.streams = tuple(streams)
        self._registry = registry
        self._loop = loop
        self._loop_thread = threading.get_ident() if loop is not None else None
        self.infos: list[dict[str, Any]] = []
        self._registered = True
        registry.register(self)

    async def refresh(self) -> None:
        """Ask the server for the watched streams' info now."""
        if not self.streams:
            self.infos = await list_streams(self.conn)
            return
        infos = []
        for name in self.streams:
            try:
                infos.append(await stream_info(self.conn, name))
            except StreamNotFound:
                continue  # deleted since: no series until it is back
        self.infos = infos

    def _refresh_for_scrape(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or threading.get_ident() == self._loop_thread:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.refresh(), loop).result(SCRAPE_TIMEOUT)
        except Exception as exc:  # the last known values are served
            log.debug("stream info not refreshed for a scrape: %s", exc)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        self._refresh_for_scrape()
        infos = list(self.infos)
        for name, key, doc in _STREAM_GAUGES:
            gauge = GaugeMetricFamily(f"oncestream_stream_{name}", doc, labels=["stream"])
            for info in infos:
                stream = str(info.get("config", {}).get("name", ""))
                gauge.add_metric([stream], float(info.get("state", {}).get(key, 0)))
            yield gauge
        rows = [
            (str(info.get("config", {}).get("name", "")), row)
            for info in infos
            for row in upstream_rows(info)
        ]
        for kind in ("mirror", "source"):
            for name, key, doc in _UPSTREAM_GAUGES:
                gauge = GaugeMetricFamily(
                    f"oncestream_stream_{kind}_{name}",
                    f"{doc} ({kind}s)",
                    labels=["stream", "origin"],
                )
                for stream, row in rows:
                    if row["kind"] == kind:
                        gauge.add_metric([stream, row["origin"]], float(row[key]))
                yield gauge

    def close(self) -> None:
        """Stop reporting these streams."""
        if self._registered:
            self._registry.unregister(self)
            self._registered = False


def instrument_streams(
    conn: Connection, streams: Sequence[str] = (), registry: CollectorRegistry = REGISTRY
) -> StreamsInstrumentation:
    """Export the info of ``streams`` (every stream when empty) through ``registry``.

    Call it from the event loop ``conn`` runs on: each scrape (from the HTTP
    server's thread) asks the server through that loop, waiting up to 2 s.

    Raises:
        ConfigError: a stream name is empty.
    """
    for name in streams:
        if not name:
            raise ConfigError("instrument_streams: a stream name is empty")
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    return StreamsInstrumentation(conn, streams, registry, loop)
