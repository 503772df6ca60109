"""Messages behind, per stream, from a streaming query's progress (no pyspark import)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._offsets import CREATED_KEY

__all__ = ["lag"]


def _offsets(value: Any) -> dict[str, int]:
    """``{"ORDERS": 42}`` from a progress offset (JSON text or mapping); {} otherwise.

    The streams' creation times (:data:`~oncestream.spark._offsets.CREATED_KEY`) are skipped.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, int] = {}
    for key, seq in value.items():
        if key == CREATED_KEY:
            continue
        if isinstance(seq, bool) or not isinstance(seq, int | str):
            return {}  # not a jetstream offset (e.g. Kafka's nested topic -> partition map)
        try:
            out[str(key)] = int(seq)
        except ValueError:
            return {}
    return out


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def lag(query_or_progress: Any) -> dict[str, int]:
    """How many stream sequences each ``jetstream`` source of a query is behind.

    For every stream, the stream's last sequence when the last micro-batch was
    planned (the source's ``latestOffset`` in ``query.lastProgress``) minus the last
    sequence that micro-batch read (its ``endOffset``). With a ``subjects`` filter it
    counts the stream's sequences, not only the matching messages: an upper bound.

    Args:
        query_or_progress: a ``StreamingQuery`` (classic or Spark Connect), or its
            ``lastProgress`` (object or dict).

    Returns:
        ``{stream: messages_behind}``; empty before the first progress report.

    Example::

        query = df.writeStream.format("jetstream")....start()
        print(oncestream.spark.lag(query))  # {"ORDERS": 1200}
    """
    progress = query_or_progress
    if hasattr(query_or_progress, "lastProgress"):
        progress = query_or_progress.lastProgress
    if progress is None:
        return {}
    behind: dict[str, int] = {}
    for source in _get(progress, "sources") or ():
        latest = _offsets(_get(source, "latestOffset"))
        end = _offsets(_get(source, "endOffset"))
        for stream, head in latest.items():
            done = end.get(stream, 0)
            behind[stream] = max(behind.get(stream, 0), max(head - done, 0))
    return behind
