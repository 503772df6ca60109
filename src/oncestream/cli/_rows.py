"""The table rows of streams and consumers, shared by ``stream ls``, ``consumer ls`` and
``status`` (the same keys in the table and in ``--json``)."""

from __future__ import annotations

from typing import Any

__all__ = ["consumer_row", "stream_row"]


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
