"""create_stream_if_missing (used by the sink's createStream=true) never changes a stream."""

from __future__ import annotations

from typing import Any

from oncestream._connection import Connection
from oncestream.streams import StreamSpec, create_stream_if_missing


async def test_creates_missing_and_leaves_existing_alone(
    conn: Connection, make_stream: Any
) -> None:
    info = await create_stream_if_missing(conn, StreamSpec(name="NEW", subjects=("new.>",)))
    assert info["config"]["subjects"] == ["new.>"]
    await make_stream("OLD", ("old.>",), duplicate_window=30)
    info = await create_stream_if_missing(
        conn, StreamSpec(name="OLD", subjects=("other.>",), duplicate_window=600)
    )
    assert info["config"]["subjects"] == ["old.>"]
    assert info["config"]["duplicate_window"] == 30 * 10**9
