"""Which msg ids a stream holds in a sequence range: the resume scans and the sink's check.

:func:`stored_ids` (the file loader's and the atomic publish's resume, the Spark sink's
stored-id check) and :func:`locate_ids` (the Publisher's duplicate report) read through
the range reader (:mod:`._range`), headers only where a consumer is used.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from .._connection import Connection
from .._headers import msg_id_key
from .._retry import leader_stream_info, retrying
from ._range import RangeReader

__all__ = ["locate_ids", "stored_ids"]

log = logging.getLogger(__name__)


async def stored_ids(
    conn: Connection,
    stream: str,
    after: int,
    until: int | None = None,
    *,
    retry_timeout: float = 0.0,
    budget_source: str = "the caller's retry budget",
) -> set[str]:
    """The msg ids ``stream`` holds at sequences ``after+1 .. until`` (default: its end).

    Ids are :func:`~oncestream._headers.msg_id_key` keys (the server's reading).
    The range reader reads headers only where it uses a consumer; a stream with
    ``allow_direct`` is read with batched direct gets.

    The stream's end is the leader's, and the range is read to it: a replica of
    a stream without a leader answers ``STREAM.INFO`` with its own state, and a
    direct get may be served by a replica behind the leader or, on any stream, by
    a mirror with ``mirror_direct``; each may lack what the leader stored last
    (and a caller that finds ids absent sends them again).

    Args:
        retry_timeout: seconds to ride out a transient failure (an election, a paused
            leader) of the stream lookup and of each read (0: none).
        budget_source: what sets ``retry_timeout``, named when it runs out.

    Raises:
        StreamNotFound: the stream does not exist.
        Unavailable: the stream had no leader for ``retry_timeout``.
    """
    info = await retrying(
        lambda: leader_stream_info(conn, stream),
        budget=retry_timeout,
        what=f"STREAM.INFO {stream}",
        budget_source=budget_source,
    )
    last = int(info["state"].get("last_seq", 0))
    if until is not None:
        last = min(last, until)
    ids: set[str] = set()
    if last <= after:
        return ids
    direct = bool(info["config"].get("allow_direct"))
    reader = RangeReader(
        conn,
        stream,
        after + 1,
        last,
        direct=direct,
        headers_only=not direct,
        retry_timeout=retry_timeout,
        # A replica behind the leader, or a mirror with mirror_direct (it answers its
        # origin's direct gets, whatever the origin's replicas), may serve the read and
        # end it early: ids missed so would count as absent. The leader is asked only
        # when a read runs dry before the end, so a complete read costs nothing more.
        replicated=direct or int(info["config"].get("num_replicas") or 1) > 1,
        budget_source=budget_source,
    )
    try:
        while (chunk := await reader.next_chunk()) is not None:
            for raw in chunk.headers:
                key = msg_id_key(raw)
                if key is not None:
                    ids.add(key)
    finally:
        await reader.close()
    log.info("stream %s: %d msg ids after sequence %d (read to %d)", stream, len(ids), after, last)
    return ids


async def locate_ids(
    conn: Connection,
    stream: str,
    wanted: Collection[str],
    first: int,
    last: int,
    *,
    direct: bool,
    replicated: bool = False,
    retry_timeout: float = 0.0,
) -> dict[str, int]:
    """Where ``stream`` holds the msg ids ``wanted`` at sequences ``first..last``: id -> sequence.

    Reads in order, pages about the size of ``wanted``, and stops as soon as every
    wanted id was seen, so ids stored together cost about their own number of
    messages wherever they lie in the range. An id stored more than once maps to
    its first sequence in the range. Ids are compared as
    :func:`~oncestream._headers.msg_id_key` keys. ``direct``: the stream has
    ``allow_direct`` (batched direct gets; else a headers-only consumer);
    ``replicated`` and ``retry_timeout`` as for :class:`RangeReader`.

    Raises:
        StreamNotFound: the stream does not exist.
    """
    left = set(wanted)
    found: dict[str, int] = {}
    if not left or last < first:
        return found
    reader = RangeReader(
        conn,
        stream,
        first,
        last,
        direct=direct,
        batch=max(256, min(len(left), 4096)),
        headers_only=not direct,
        replicated=replicated,
        retry_timeout=retry_timeout,
    )
    try:
        while left and (chunk := await reader.next_chunk()) is not None:
            for index, raw in enumerate(chunk.headers):
                key = msg_id_key(raw)
                if key is not None and key in left:
                    left.discard(key)
                    found[key] = reader.sequence(chunk, index)
    finally:
        await reader.close()
    return found
