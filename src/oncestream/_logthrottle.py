"""Rate-limited logging of repeated identical events (e.g. a handler failing every message).

The first ``burst`` occurrences of a key are logged as they come; after that
at most one summary line per ``interval`` says how many more were suppressed.
Digits in keys are ignored, so failures differing only in a sequence number
or a counter in their text count as identical.

Example::

    throttle = LogThrottle(log, burst=5, interval=10.0)
    throttle.log(logging.WARNING, "ValueError: bad", "seq %d failed: %s", seq, text)
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LogThrottle"]

_DIGITS = re.compile(r"\d+")


@dataclass
class _Entry:
    seen: int = 0
    suppressed: int = 0
    last_summary: float = 0.0


class LogThrottle:
    """Log the first ``burst`` events per key, then one summary line per ``interval``."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 5,
        interval: float = 10.0,
        max_keys: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self.max_keys = max_keys
        self.clock = clock
        self._entries: dict[str, _Entry] = {}

    def log(self, level: int, key: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless ``key`` was seen ``burst`` times already.

        Returns:
            True when a line was written (the event itself or a summary).
        """
        key = _DIGITS.sub("#", key)
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) >= self.max_keys:
                self._entries.clear()
            entry = self._entries[key] = _Entry(last_summary=self.clock())
        entry.seen += 1
        if entry.seen <= self.burst:
            suffix = (
                " (further identical failures are summarised)" if entry.seen == self.burst else ""
            )
            self.logger.log(level, message + suffix, *args)
            return True
        entry.suppressed += 1
        now = self.clock()
        if now - entry.last_summary < self.interval:
            return False
        self.logger.log(
            level,
            "%d more identical failures in the last %.0fs (%d in all): %s",
            entry.suppressed,
            now - entry.last_summary,
            entry.seen,
            key,
        )
        entry.suppressed = 0
        entry.last_summary = now
        return True
