"""create_stream_if_missing (used by the sink's createStream=true) never changes a stream."""

from __future__ import annotations

from typing import Any

from oncestream._connection import Connection
from oncestream.streams import StreamSpec, create_stream_if_missing
from oncestream.streams._internal import overlapping_streams


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


async def test_overlapping_streams_are_named(conn: Connection, make_stream: Any) -> None:
    await make_stream("ORD", ("orders.>",))
    await make_stream("RET", ("returns.eu", "returns.us"))
    await make_stream("OTH", ("other.>",))
    found = await overlapping_streams(conn, ("orders.eu.*", "returns.*"))
    assert found == {"ORD": ("orders.>",), "RET": ("returns.eu", "returns.us")}
    assert await overlapping_streams(conn, ("nobody.>",)) == {}
