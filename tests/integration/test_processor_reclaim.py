"""What a Processor that starts does with messages a closed connection held.

A plain client pulls ten messages without acknowledging them and closes its
connection: the instance that held them is gone. A Processor that starts
takes them back at once (the consumer reset to its ack floor); with ``bind``
(no consumer API calls) or on a server without ``CONSUMER.RESET`` (before
2.14) it leaves them alone, so they come back only after the ack wait (30 s
here), as docs/production.md says.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harness import publish_n
from oncestream import (
    Connection,
    ConnectOptions,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from tests._support import effects
from tests.handlers import record

STREAM, CONSUMER = "RECLAIM", "w"
HELD, TOTAL = 10, 30


def _options(**kw: Any) -> ProcessorOptions:
    return ProcessorOptions(batch=10, ack_wait=30.0, expires=2.0, prune_interval=0, **kw)


async def _held_by_a_gone_client(options: ConnectOptions) -> None:
    """Pull ``HELD`` messages on another connection, never ack them, close it."""
    async with await connect(options) as other:
        sub = await other.nc.jetstream().pull_subscribe_bind(CONSUMER, STREAM)
        assert len(await sub.fetch(HELD, timeout=5)) == HELD


@pytest.mark.parametrize("case", ["plain", "bind", "server 2.13"])
async def test_what_a_gone_client_held_is_taken_back_at_start_unless_it_cannot_be(
    case: str,
    conn: Connection,
    options: ConnectOptions,
    make_stream: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_stream(STREAM, ("reclaim.>",))
    db = tmp_path / "effects.db"
    first = Processor(conn, STREAM, CONSUMER, record, ledger=SQLiteLedger(db), options=_options())
    task = asyncio.create_task(first.run())
    await first.wait_running()
    await first.stop()
    await task  # the consumer exists now, with nothing delivered
    await publish_n(conn, "reclaim.a", TOTAL)
    await _held_by_a_gone_client(options)
    assert (await conn.consumer_info(STREAM, CONSUMER))["num_ack_pending"] == HELD

    if case == "server 2.13":
        monkeypatch.setattr("oncestream.process._reclaim.server_version", lambda _conn: (2, 13, 4))
    opts = _options(bind=case == "bind")
    processor = Processor(conn, STREAM, CONSUMER, record, ledger=SQLiteLedger(db), options=opts)
    task = asyncio.create_task(processor.run())
    try:
        if case == "plain":
            await processor.wait_caught_up(timeout=10)  # well before the 30 s ack wait
            assert processor.stats.reclaimed == HELD
            assert effects(db) == (TOTAL, TOTAL)
        else:
            await processor.wait_until(lambda s: s.applied >= TOTAL - HELD, timeout=10)
            for _ in range(100):  # at most 5 s: the server counts the last batch's acks
                info = await conn.consumer_info(STREAM, CONSUMER)
                if info["num_ack_pending"] <= HELD:
                    break
                await asyncio.sleep(0.05)
            assert info["num_ack_pending"] == HELD, "the held messages were taken back"
            assert info["num_redelivered"] == 0, info
            assert processor.stats.reclaimed == 0
            assert effects(db) == (TOTAL - HELD, TOTAL - HELD)
    finally:
        await processor.stop()
        await task
