"""Helpers shared by the topology scenario tests (edge-to-hub, cluster, cross-account)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import orjson

from oncestream import Connection, OperationTimeout
from oncestream.publish import Publisher, PublisherOptions


async def wait_messages(
    conn: Connection, stream: str, count: int, *, timeout: float = 60.0
) -> float:
    """Poll stream info (bounded) until ``stream`` holds ``count`` messages; seconds taken."""
    start = time.monotonic()
    deadline = start + timeout
    have = -1
    while time.monotonic() < deadline:
        try:
            have = (await conn.stream_info(stream))["state"]["messages"]
        except OperationTimeout:
            have = -1
        if have >= count:
            return time.monotonic() - start
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream} has {have} of {count} messages after {timeout}s")


async def stream_ids(conn: Connection, stream: str, *, timeout: float = 60.0) -> list[str | None]:
    """Every message's Nats-Msg-Id in ``stream``, in order, read through the stream leader.

    Uses an ephemeral pull consumer (not direct gets, which any replica may answer
    while it is still catching up after a restart).
    """
    name = f"read_{uuid.uuid4().hex[:8]}"
    config = {
        "name": name,
        "deliver_policy": "all",
        "ack_policy": "none",
        "replay_policy": "instant",
        "inactive_threshold": 60_000_000_000,
        "num_replicas": 1,
        "mem_storage": True,
    }
    created = await conn.api(
        f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": config}
    )
    remaining = int(created["num_pending"])
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def on_msg(msg: Any) -> None:
        queue.put_nowait(msg)

    inbox = conn.nc.new_inbox()
    sub = await conn.nc.subscribe(inbox, cb=on_msg)
    ids: list[str | None] = []
    deadline = time.monotonic() + timeout
    try:
        while remaining > 0:
            assert time.monotonic() < deadline, f"read {len(ids)}, {remaining} still pending"
            batch = min(remaining, 2000)
            request = orjson.dumps({"batch": batch, "expires": 1_000_000_000})
            await conn.nc.publish(
                f"{conn.prefix}.CONSUMER.MSG.NEXT.{stream}.{name}", request, reply=inbox
            )
            for _ in range(batch):
                try:
                    msg = await asyncio.wait_for(queue.get(), 5)
                except TimeoutError:
                    break
                if not msg.reply:  # a status: 404 no messages, 408 request expired
                    break
                ids.append((msg.headers or {}).get("Nats-Msg-Id"))
                remaining = int(msg.reply.split(".")[-1])
                if remaining == 0:
                    break
    finally:
        await sub.unsubscribe()
    return ids


def assert_exactly_once(ids: list[str | None], expected: list[str]) -> None:
    """Each expected id exactly once and nothing else (reports lost / duplicated counts)."""
    counts = Counter(ids)
    duplicated = {k: c for k, c in counts.items() if c > 1}
    missing = set(expected) - set(counts)
    unexpected = set(counts) - set(expected)
    assert not duplicated and not missing and not unexpected, (
        f"lost={len(missing)} duplicated={len(duplicated)} unexpected={len(unexpected)} "
        f"e.g. {sorted(missing)[:3]} {sorted(duplicated)[:3]} {sorted(map(str, unexpected))[:3]}"
    )


async def publish_ids(
    conn: Connection, subject: str, ids: list[str], *, stream: str | None = None
) -> float:
    """Publish one message per id (msg id = the id) with the Publisher; msgs/s."""
    start = time.monotonic()
    async with Publisher(conn, PublisherOptions(stream=stream, ack_timeout=2.0)) as pub:
        futures = [await pub.publish(subject, i.encode(), msg_id=i) for i in ids]
        await pub.flush()
        await asyncio.gather(*futures)
    return len(ids) / (time.monotonic() - start)
