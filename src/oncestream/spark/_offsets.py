"""The checkpointed offsets of the ``jetstream`` source: positions and the streams' creation times.

An offset is ``{"ORDERS": 20000, "RETURNS": 311, "stream.created": {"ORDERS":
"2026-11-24T09:12:01.123456789Z", "RETURNS": "..."}}``: per stream the last
sequence read, and under :data:`CREATED_KEY` the ``created`` time of the
stream those sequences belong to (``STREAM.INFO``). A stream deleted and
re-created under the same name starts again at sequence 1, so a position alone
cannot tell the new stream from the old one once the new one has grown past
it; the creation time can. It is what nats-server's own stream identity
(``Nats-Stream-Identity``, ``stream.identity()``) hashes, it survives server
restarts and is the same on every replica, and ``STREAM.INFO``, which planning
reads anyway, has carried it on every server version.

``stream.created`` cannot be a stream name (``.`` is not allowed in one), and
per-stream values stay plain integers, so ``offset["ORDERS"]`` keeps meaning
what it meant. Offsets written before the creation time was recorded have no
:data:`CREATED_KEY`: they are accepted (with a warning) and the next offset
records it. No pyspark import: :mod:`oncestream.spark._lag` reads offsets too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CREATED_KEY",
    "RECREATED_FIX",
    "created_of",
    "make_offset",
    "recreated_text",
    "split_offset",
]

#: The offset key holding ``{stream: created}``.
CREATED_KEY = "stream.created"

#: The way out named by the error about a re-created stream.
RECREATED_FIX = (
    "set option failOnDataLoss=false to read the new stream from its beginning (what the old "
    "one held after that position is lost), or start the query with a new checkpoint"
)


def created_of(info: Mapping[str, Any]) -> str | None:
    """The stream's creation time from its ``STREAM.INFO`` (None if the server gave none)."""
    return str(info.get("created") or "") or None


def make_offset(positions: Mapping[str, int], infos: Mapping[str, Any]) -> dict[str, Any]:
    """The offset of ``positions`` in the streams described by ``infos``."""
    offset: dict[str, Any] = {stream: int(seq) for stream, seq in positions.items()}
    created = {s: c for s in positions if s in infos and (c := created_of(infos[s]))}
    if created:
        offset[CREATED_KEY] = created
    return offset


def split_offset(offset: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """``(positions, creation times)`` of an offset (the times are {} in older offsets)."""
    positions = {str(k): int(v) for k, v in offset.items() if k != CREATED_KEY}
    raw = offset.get(CREATED_KEY)
    created = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    return positions, created


def recreated_text(stream: str, position: int, recorded: str, info: Mapping[str, Any]) -> str:
    """Why a position recorded in the stream created at ``recorded`` does not apply any more."""
    state = info.get("state", {})
    first, last = int(state.get("first_seq", 0)), int(state.get("last_seq", 0))
    return (
        f"stream {stream!r} was deleted and re-created: the checkpoint's position {position} "
        f"is in the stream created {recorded}, the stream now on the server was created "
        f"{created_of(info)} (sequences {first}..{last})"
    )
