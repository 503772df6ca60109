"""Handlers and pulls receive oncestream's Message with correct JetStream metadata."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import publish_n
from oncestream import (
    Connection,
    LedgerTx,
    Message,
    MessageMetadata,
    Processor,
    ProcessorOptions,
    PullOptions,
    SQLiteLedger,
    pull_messages,
)


async def _publish(conn: Connection, subject: str, count: int) -> None:
    await publish_n(conn, subject, count, msg_id=lambda i: f"id-{i}", headers=lambda i: {"K": "v"})


async def test_a_handler_receives_a_message_with_metadata(
    conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("MSG", ("msg.>",))
    before = time.time()
    await _publish(conn, "msg.a", 5)
    seen: list[tuple[Message, MessageMetadata]] = []

    def handler(msg: Message, tx: LedgerTx) -> None:
        assert isinstance(msg, Message)
        md = msg.metadata
        if md.stream_seq == 3 and md.num_delivered == 1:
            raise RuntimeError("fail the first delivery of seq 3")
        seen.append((msg, md))

    options = ProcessorOptions(batch=10, ack_wait=2, expires=5, backoff=(0.1,), prune_interval=0)
    ledger = SQLiteLedger(tmp_path / "l.db")
    proc = Processor(conn, "MSG", "worker", handler, ledger=ledger, options=options)
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.applied >= 5, timeout=30)
    finally:
        await proc.stop()
        await task
    by_seq = {md.stream_seq: (msg, md) for msg, md in seen}
    assert sorted(by_seq) == [1, 2, 3, 4, 5]
    for seq, (msg, md) in by_seq.items():
        assert msg.subject == "msg.a" and msg.data == b"%d" % (seq - 1)
        assert msg.headers is not None and msg.headers["K"] == "v"
        assert msg.msg_id == f"id-{seq - 1}" and msg.seq == seq
        assert (md.stream, md.consumer) == ("MSG", "worker")
        assert md.num_delivered == (2 if seq == 3 else 1)
        assert md.consumer_seq >= 1 and md.num_pending >= 0
        assert before - 1 <= md.timestamp_ns / 1e9 <= time.time() + 1
        assert abs(md.timestamp - datetime.now(UTC)).total_seconds() < 60
        assert md.domain is None
        assert msg.metadata is md  # parsed once, then kept
    assert by_seq[3][1].consumer_seq > by_seq[5][1].consumer_seq  # redelivered later


async def test_pulled_messages_ack_nak_term_and_in_progress(
    conn: Connection, make_stream: Any
) -> None:
    await make_stream("ACKS", ("acks.>",))
    await conn.api(
        "CONSUMER.CREATE.ACKS.c",
        {"stream_name": "ACKS", "config": {"durable_name": "c", "ack_policy": "explicit",
                                           "ack_wait": 2_000_000_000}},
    )  # fmt: skip
    await _publish(conn, "acks.x", 4)
    async with pull_messages(conn, "ACKS", "c", PullOptions(batch=10, expires=5)) as stream:
        got: list[Message] = []
        async with asyncio.timeout(10):
            while len(got) < 4:
                got += await stream.next_batch(timeout=5)
        first, second, third, fourth = got
        await first.ack_sync(timeout=2)
        await second.in_progress()
        await second.ack()
        await third.term("poison")
        await fourth.nak()
        again: list[Message] = []
        async with asyncio.timeout(10):
            while not again:
                again += await stream.next_batch(timeout=5)
        assert [m.metadata.stream_seq for m in again] == [4]
        assert again[0].metadata.num_delivered == 2
        await again[0].ack_sync()
    info = await conn.consumer_info("ACKS", "c")
    assert info["num_ack_pending"] == 0 and info["num_pending"] == 0
