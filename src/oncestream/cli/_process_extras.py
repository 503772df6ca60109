"""`oncestream process` additions: where a new consumer starts, the metrics endpoint (also
`publish`'s), and the progress rate over a recent window."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from .._errors import ConfigError
from .._options import parse_time
from ..process import GroupMember, Processor
from ..publish import Publisher
from ..read import StartPosition

log = logging.getLogger(__name__)

__all__ = ["RecentRate", "metrics_endpoint", "start_position"]


def start_position(
    start_seq: int | None, start_time: str | None, new_only: bool
) -> StartPosition | None:
    """The StartPosition of ``--start-seq`` / ``--start-time`` / ``--new-only`` (None if none).

    Raises:
        ConfigError: more than one given, or a bad value (naming the flag).
    """
    given = [
        flag
        for flag, value in (
            ("--start-seq", start_seq),
            ("--start-time", start_time),
            ("--new-only", new_only or None),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise ConfigError(f"give at most one of --start-seq, --start-time, --new-only; got {given}")
    if start_seq is not None and start_seq < 1:
        raise ConfigError(f"--start-seq must be >= 1, got {start_seq}")
    if not given:
        return None
    return StartPosition(
        seq=start_seq,
        time=parse_time("--start-time", start_time) if start_time is not None else None,
        new_only=new_only,
    )


def metrics_endpoint(
    target: Processor | Publisher | GroupMember, port: int | None, host: str
) -> Any:
    """Serve a Processor's, Publisher's or group member's metrics on ``host:port``
    (None: no endpoint)."""
    if port is None:
        return None
    from ..metrics import instrument, instrument_group, serve_metrics

    server = serve_metrics(port, host)
    if isinstance(target, GroupMember):
        instrument_group(target)
    else:
        instrument(target)
    log.info("metrics on %s", server.url)
    return server


class RecentRate:
    """Events per second over the last ``window`` seconds (not since start)."""

    def __init__(self, window: float = 30.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def update(self, total: int, now: float | None = None) -> float:
        """Record the running ``total`` and return the rate over the window."""
        now = time.monotonic() if now is None else now
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()
        first_time, first_total = self._samples[0]
        elapsed = now - first_time
        return (total - first_total) / elapsed if elapsed > 0 else 0.0
