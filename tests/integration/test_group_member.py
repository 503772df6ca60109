"""Group members in one process over a partitioned stream: every message applied once, each
key in order, each partition applied by one member, partitions moving on join and leave."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from oncestream import (
    ConfigError,
    Connection,
    ConnectOptions,
    GroupMember,
    GroupOptions,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from oncestream.process import partition_consumer
from oncestream.streams import Partitioning

STREAM, GROUP, PARTITIONS = "GRP", "svc", 8
FAST = ProcessorOptions(batch=50, pinned_ttl=2.0, prune_interval=0, ack_wait=30.0)


def _handler(name: str):  # type: ignore[no-untyped-def]
    def handle(msg: Any, tx: Any) -> None:
        tx.execute(
            "INSERT INTO effects (seq, subject, member) VALUES (?, ?, ?)",
            (msg.seq, msg.subject, name),
        )

    return handle


def _ledgers(folder: Path):  # type: ignore[no-untyped-def]
    def ledger(partition: int) -> SQLiteLedger:
        path = folder / f"svc-{partition}.db"
        with sqlite3.connect(path) as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS effects (seq INTEGER, subject TEXT, member TEXT)"
            )
        return SQLiteLedger(path)

    return ledger


def _effects(folder: Path) -> list[tuple[int, str, str]]:
    rows: list[tuple[int, str, str]] = []
    for path in sorted(folder.glob("svc-*.db")):
        with sqlite3.connect(path) as con:
            rows += con.execute("SELECT seq, subject, member FROM effects ORDER BY rowid")
    return rows


def _check(rows: list[tuple[int, str, str]], total: int) -> None:
    seqs = [r[0] for r in rows]
    assert len(seqs) == len(set(seqs)), f"{len(seqs) - len(set(seqs))} applied twice"
    assert sorted(seqs) == list(range(1, total + 1)), f"{total - len(set(seqs))} missing"
    last: dict[str, int] = {}
    for seq, subject, member in rows:  # rows of one key share a file: rowid is their order
        assert seq > last.get(subject, 0), f"{subject}: {seq} by {member} after {last[subject]}"
        last[subject] = seq


class Group:
    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self.members: dict[str, tuple[GroupMember, asyncio.Task[Any], Connection]] = {}

    async def add(
        self, name: str, processor_options: ProcessorOptions = FAST, **options: Any
    ) -> GroupMember:
        conn = await connect(ConnectOptions(servers=(self.url,)))
        member = GroupMember(
            conn, STREAM, GROUP, _handler(name), ledger=_ledgers(self.folder),
            options=GroupOptions(member=name, heartbeat=0.2, member_ttl=1, **options),
            processor_options=processor_options,
        )  # fmt: skip
        self.members[name] = (member, asyncio.create_task(member.run()), conn)
        await member.wait_running()
        return member

    async def remove(self, name: str) -> None:
        member, task, conn = self.members.pop(name)
        member.request_stop()
        await task
        await conn.close()

    def owners(self) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
        for name, (member, _, _) in self.members.items():
            for p in member.active:
                found[p].append(name)
        return found


@pytest.fixture
async def group(nats_server, tmp_path: Path) -> AsyncIterator[Group]:  # type: ignore[no-untyped-def]
    running = Group(nats_server.url, tmp_path)
    yield running
    for name in list(running.members):
        await running.remove(name)


async def _publish(conn: Connection, first: int, count: int) -> None:
    js = conn.nc.jetstream()
    for i in range(first, first + count):
        await js.publish(f"grp.k{i % 40}", b"%d" % i)


async def _wait_applied(folder: Path, total: int, timeout: float) -> list[tuple[int, str, str]]:
    deadline = asyncio.get_running_loop().time() + timeout
    rows = _effects(folder)
    while len(rows) < total and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)  # several ledger files written by several Processors
        rows = _effects(folder)
    return rows


async def _wait_acked(conn: Connection, consumer: str, timeout: float = 10.0) -> None:
    """Every message of ``consumer`` acknowledged (the last batches' acks may trail their
    commits)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        info = await conn.consumer_info(STREAM, consumer)
        if not info["num_ack_pending"] and not info["num_pending"]:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{consumer} not all acked: {info}"
        await asyncio.sleep(0.1)  # the server's counters: no event to await


async def _wait_spread(group: Group, members: set[str], timeout: float = 20.0) -> None:
    """Every partition applied by exactly one member, and each member of ``members``
    applying its share."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        owners = group.owners()
        if all(len(o) == 1 for o in owners.values()) and {o[0] for o in owners.values()} == members:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"partitions not spread over {sorted(members)}: {group.owners()}")


@pytest.mark.parametrize("ack_policy", ["explicit", "all"])
async def test_members_share_partitions_and_hand_them_over(
    conn: Connection, make_stream, group: Group, tmp_path: Path, ack_policy: str
) -> None:  # type: ignore[no-untyped-def]
    """With ack policy ``all`` too: each partition's pinned member acks once per batch."""
    options = dataclasses.replace(FAST, ack_policy=ack_policy)
    await make_stream(STREAM, ("grp.*",), partitions=PARTITIONS, partition_key=(1,))
    for name in ("a", "b", "c"):
        await group.add(name, options)
    await _publish(conn, 0, 400)  # a pin is given with a message: spread once they flow
    await _wait_spread(group, {"a", "b", "c"})
    rows = await _wait_applied(tmp_path, 400, 30)
    _check(rows, 400)
    # A clean leave: its partitions are handed over at once (unpinned), not after pinned_ttl.
    await group.remove("b")
    await _publish(conn, 400, 400)
    await _wait_spread(group, {"a", "c"}, timeout=10)
    # A join takes its share from the others.
    await group.add("d", options)
    await _publish(conn, 800, 400)
    await _wait_spread(group, {"a", "c", "d"})
    rows = await _wait_applied(tmp_path, 1200, 30)
    _check(rows, 1200)
    assert {r[2] for r in rows} == {"a", "b", "c", "d"}
    partitioning = Partitioning(subjects="grp.*", partitions=PARTITIONS, key=(1,))
    for _seq, subject, _ in rows:
        assert partitioning.partition_of_stored(subject) is not None
    for p in range(PARTITIONS):
        info = await conn.consumer_info(STREAM, partition_consumer(GROUP, p))
        assert info["config"]["filter_subject"] == partitioning.filter_for(p)
        assert info["config"]["ack_policy"] == ack_policy
        await _wait_acked(conn, partition_consumer(GROUP, p))


async def test_static_members_take_fixed_partitions(
    conn: Connection, make_stream, group: Group, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("grp.*",), partitions=PARTITIONS, partition_key=(1,))
    first = await group.add("s0", static=(0, 2))
    second = await group.add("s1", static=(1, 2))
    await _publish(conn, 0, 300)
    rows = await _wait_applied(tmp_path, 300, 30)
    _check(rows, 300)
    assert first.partitions == [0, 2, 4, 6] and second.partitions == [1, 3, 5, 7]


async def test_a_static_member_without_a_partition_says_so(
    conn: Connection, make_stream, group: Group, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """Member 9 of 10 over 8 partitions gets none: it runs, applies nothing, and warns once."""
    await make_stream(STREAM, ("grp.*",), partitions=PARTITIONS, partition_key=(1,))
    caplog.set_level(logging.WARNING, logger="oncestream.process")
    idle = await group.add("s9", static=(9, 10))
    deadline = time.monotonic() + 10
    while "gets none of the stream's 8 partitions" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        await asyncio.sleep(0.05)  # the member's first round logs it
    assert idle.partitions == []


async def test_a_member_of_an_unpartitioned_stream_is_refused(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("PLAIN", ("plain.>",))
    member = GroupMember(conn, "PLAIN", GROUP, _handler("x"), ledger=_ledgers(tmp_path))
    with pytest.raises(ConfigError, match="stream PLAIN is not partitioned"):
        await member.run()
    with pytest.raises(ConfigError, match="must leave filter_subject unset"):
        GroupMember(
            conn, "PLAIN", GROUP, _handler("x"), ledger=_ledgers(tmp_path),
            processor_options=ProcessorOptions(filter_subject="plain.a"),
        )  # fmt: skip
