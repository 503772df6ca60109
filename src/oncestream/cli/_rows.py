"""The table rows of streams and consumers, shared by ``stream ls``, ``consumer ls`` and
``status`` (the same keys in the table and in ``--json``)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "BOOKKEEPING_PREFIX",
    "config_differences",
    "consumer_row",
    "hidden_note",
    "stream_row",
]

#: Streams oncestream keeps its own records in (publish progress, the Spark sink's
#: commit records): hidden from listings unless asked for (docs/operations.md).
BOOKKEEPING_PREFIX = "ONCESTREAM_"


def stream_row(info: dict[str, Any], *, settings: bool = True) -> dict[str, Any]:
    """The row of a stream info; ``settings`` adds its storage and replicas."""
    state, config = info.get("state", {}), info.get("config", {})
    row: dict[str, Any] = {
        "stream": config.get("name"),
        "subjects": config.get("subjects") or [],
    }
    if settings:
        row["storage"] = config.get("storage")
        row["replicas"] = config.get("num_replicas", 1)
    row.update(
        {
            "messages": state.get("messages", 0),
            "bytes": state.get("bytes", 0),
            "first_seq": state.get("first_seq", 0),
            "last_seq": state.get("last_seq", 0),
            "consumers": state.get("consumer_count", 0),
        }
    )
    return row


def consumer_row(info: dict[str, Any], *, with_filter: bool = True) -> dict[str, Any]:
    """The row of a consumer info; ``with_filter`` adds its subject filter(s)."""
    config = info.get("config", {})
    row: dict[str, Any] = {"consumer": info.get("name")}
    if with_filter:
        row["filter"] = config.get("filter_subject") or config.get("filter_subjects") or ""
    row.update(
        {
            "ack_policy": config.get("ack_policy"),
            "num_pending": info.get("num_pending", 0),
            "ack_pending": info.get("num_ack_pending", 0),
            "redelivered": info.get("num_redelivered", 0),
            "ack_floor": info.get("ack_floor", {}).get("stream_seq", 0),
            "delivered": info.get("delivered", {}).get("stream_seq", 0),
            "waiting_pulls": info.get("num_waiting", 0),
        }
    )
    return row


#: Config keys holding nanoseconds (shown as durations in differences).
_NANOS = frozenset(
    ("duplicate_window", "max_age", "ack_wait", "idle_heartbeat", "inactive_threshold")
)


def _shown(key: str, value: Any) -> str:
    if key in _NANOS and isinstance(value, int):
        return f"{value / 1e9:g}s"
    return repr(value)


def config_differences(existing: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """``"key: <existing> here, <wanted> asked"`` for each key of ``wanted`` the config lacks.

    A key the server left out of ``existing`` matches an empty or zero value;
    lists compare as sets (the server may reorder subjects).
    """
    out = []
    for key, value in wanted.items():
        have = existing.get(key)
        if isinstance(value, list | tuple) and isinstance(have, list | tuple):
            same = set(map(str, value)) == set(map(str, have))
        else:
            same = have == value or (have is None and value in (None, False, 0, "", [], {}))
        if not same:
            out.append(f"{key}: {_shown(key, have)} here, {_shown(key, value)} asked")
    return out


def hidden_note(hidden: int) -> str | None:
    """The line saying how many bookkeeping streams a listing left out (None: none)."""
    if not hidden:
        return None
    streams = "stream" if hidden == 1 else "streams"
    return f"({hidden} oncestream bookkeeping {streams} not shown; --all shows them)"
