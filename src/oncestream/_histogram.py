"""A histogram's bucket counts, as Prometheus exports them: one home for the Processor's,
the Publisher's (``oncestream.metrics``) and a Spark query's (``oncestream.spark``)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

__all__ = ["Histogram"]


class Histogram:
    """Counts observed values per bucket, and their sum; safe to feed from several threads.

    Args:
        buckets: the upper bounds, ascending (``+Inf`` is added).

    Example::

        rows = Histogram((1, 10, 100))
        rows.observe(42)
        rows.cumulative()  # ([("1.0", 0.0), ("10.0", 0.0), ("100.0", 1.0), ("+Inf", 1.0)], 42.0)
    """

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.total = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is at least it."""
        with self._lock:
            self.counts[bisect.bisect_left(self.buckets, value)] += 1
            self.total += value

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """``(bound label, observations up to it)`` per bucket, ``+Inf`` last; and the sum."""
        with self._lock:
            counts, total = list(self.counts), self.total
        out, running = [], 0
        for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out, total
