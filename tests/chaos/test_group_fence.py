"""The fence, landed deterministically: a superseded member wakes up with a batch in hand.

Two static members (``0/1``: both run every partition, one applies each, the other
stands by) share a partitioned stream. The interleaving, forced with gates in the
worker (``GATE``: the member SIGSTOPs itself when its next batch's messages are
fetched and its transaction is not begun yet) and events read from the members' output:

1. member a applies 10 messages of one partition, fetches the next ones and freezes
   before its batch transaction (``GATED``);
2. the pin moves (``CONSUMER.UNPIN``: the server state a pin that expired leaves, without
   the wait) and a message nudges the server to pin member b, which takes the partition
   over (fence, reset to the ack floor) and holds its first batch before its transaction
   (on the ledger's thread: it keeps pulling, so it keeps the pin);
3. a resumes (SIGCONT): its stale batch holds messages nobody has applied yet;
4. once a has stepped down, b's batch goes on and b applies the rest.

The property: every sequence applied once, each key in stream order, and each effect
applied by the member whose takeover of its partition came last before it (a superseded
member applies nothing). With ``ONCESTREAM_GROUP_SABOTAGE=no-fence`` the last check fails
(a applies its stale batch after b took over; the ledger's per-sequence claims still keep
each sequence once and the key order: b's batches claim every sequence from the ack
floor in order, so they wait for or find what a applied); with ``no-reset`` the test fails
too, earlier: the message a takeover drops before its reset comes back only after
``ack_wait`` (30 s), so a never reports its tenth (``ARMED``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from oncestream import Connection
from oncestream.process import partition_consumer
from oncestream.server import NatsServer
from tests.chaos.test_group_chaos import (
    GROUP,
    LAYOUT,
    PARTITIONS,
    STREAM,
    Ledgers,
    Member,
    check,
    check_owners,
    takeovers,
)

#: One partition's keys: every message of the test goes to it.
PARTITION = LAYOUT.partition_of("work.k0")
KEYS = [k for k in (f"work.k{i}" for i in range(100)) if LAYOUT.partition_of(k) == PARTITION][:3]


async def _publish(conn: Connection, first: int, count: int) -> None:
    js = conn.nc.jetstream()
    for i in range(first, first + count):
        await js.publish(KEYS[i % len(KEYS)], b"%d" % i)


async def test_a_member_superseded_with_a_batch_in_hand_applies_nothing_of_it(
    nats_server: NatsServer,
    conn: Connection,
    make_stream,  # type: ignore[no-untyped-def]
    members: list[Member],
    tmp_path: Path,
) -> None:
    await make_stream(STREAM, ("work.*",), partitions=PARTITIONS, partition_key=(1,))
    ledgers = Ledgers(f"sqlite:///{tmp_path}/svc-{{partition}}.db", "sqlite", tmp_path)
    url = nats_server.url
    a = Member(url, ledgers.url, "a", STATIC="0/1", GATE="after:10")
    members.append(a)
    await asyncio.to_thread(a.wait_line, "READY", 60)
    await _publish(conn, 0, 10)
    await asyncio.to_thread(a.wait_line, "ARMED", 30)
    hold = tmp_path / "release-b"
    b = Member(url, ledgers.url, "b", STATIC="0/1", GATE="takeover", HOLD_FILE=str(hold))
    members.append(b)
    await asyncio.to_thread(b.wait_line, "READY", 60)
    await _publish(conn, 10, 10)
    await asyncio.to_thread(a.wait_line, "GATED", 30)  # frozen, messages 11.. in hand
    consumer = partition_consumer(GROUP, PARTITION)
    await conn.api(f"CONSUMER.UNPIN.{STREAM}.{consumer}", {"group": "members"})
    await _publish(conn, 20, 1)  # the next delivery pins b
    await asyncio.to_thread(b.wait_line, "is now the active one", 30)
    await asyncio.to_thread(b.wait_line, "GATED", 30)  # taken over, nothing applied yet
    a.signal(signal.SIGCONT)
    demoted = await asyncio.to_thread(a.wait_line, "no longer the active instance", 30)
    hold.touch()
    deadline = time.monotonic() + 30
    rows = ledgers.effects()
    while len({r[0] for r in rows}) < 21 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # another process's ledger: polled
        rows = ledgers.effects()
    for member in members:
        await asyncio.to_thread(member.stop)
    check(rows, 21)
    check_owners(rows, takeovers(members))
    assert "another instance took over" in demoted, demoted  # the fence said so, not the pin
    assert {r[2] for r in rows if r[0] > 10} == {"b"}, (rows, a.lines, b.lines)
