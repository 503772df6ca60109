"""A message of a sourced stream dead-letters like any other (issue 37, item 2).

The server stamps every message of a stream that sources another with
``Nats-Stream-Source`` and refuses that header from a client (10227). The
dead-letter publish copies the original's headers; before it left the
stamped ones out (``_headers.writable_headers``), a failing message of a hub's
aggregate stream could never be dead-lettered: every attempt was refused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from oncestream import Connection, Processor, ProcessorOptions, SQLiteLedger
from oncestream.process._replay import list_dead_letters
from oncestream.streams import StreamSource, StreamSpec, ensure_stream
from tests._scenario import wait_messages


def _fails_on_2(msg: Any, tx: Any) -> None:
    if msg.data == b"2":
        raise ValueError("cannot handle record 2")


async def test_a_sourced_message_is_dead_lettered(conn: Connection, tmp_path: Path) -> None:
    await ensure_stream(conn, StreamSpec(name="SRC", subjects=("src.>",)))
    await ensure_stream(conn, StreamSpec(name="AGG", sources=(StreamSource(name="SRC"),)))
    js = conn.nc.jetstream()
    for n in range(1, 4):
        await js.publish("src.x", b"%d" % n, headers={"Nats-Msg-Id": f"r-{n}", "X-N": str(n)})
    await wait_messages(conn, "AGG", 3, timeout=30)
    options = ProcessorOptions(batch=10, max_deliver=1, dead_letter_stream="DLQ", backoff=(0.1,))
    proc = Processor(
        conn, "AGG", "w", _fails_on_2, ledger=SQLiteLedger(tmp_path / "l.db"), options=options
    )
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.applied >= 2 and s.dead_lettered >= 1, 30)
    finally:
        await proc.stop()
        stats = await task
    assert (stats.applied, stats.dead_lettered) == (2, 1)
    (letter,) = await list_dead_letters(conn, "DLQ")
    assert (letter.stream, letter.sequence, letter.msg_id) == ("AGG", 2, "r-2")
    assert letter.headers["X-N"] == ["2"]
    assert "Nats-Stream-Source" not in letter.headers
