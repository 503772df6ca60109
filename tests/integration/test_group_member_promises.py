"""Promises of docs/production.md ("Scaling out") about who runs which partitions.

- Two live instances started under one member name run the same partitions: one
  applies each, the other stands by, and takes them over when the first stops.
- A shared PostgreSQL ledger is pruned no further than the lowest ack floor of the
  registered partitions' consumers.
- A ninth member over 8 partitions runs nothing (the count of partitions bounds the
  members that can do work); when another member leaves, the balanced assignment (one
  partition each for 8 members) gives it one.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from oncestream import Connection, ConnectOptions, GroupMember, GroupOptions, connect
from oncestream.process import partition_consumer
from oncestream.streams import Partitioning
from tests.integration.test_group_member import (
    FAST,
    GROUP,
    PARTITIONS,
    STREAM,
    Group,
    _check,
    _handler,
    _ledgers,
    _publish,
    _wait_applied,
    _wait_spread,
)

ALL = list(range(PARTITIONS))


@pytest.fixture
async def group(nats_server, tmp_path: Path) -> AsyncIterator[Group]:  # type: ignore[no-untyped-def]
    running = Group(nats_server.url, tmp_path)
    yield running
    for name in list(running.members):
        await running.remove(name)


async def _until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not reached in {timeout}s: {what}")
        await asyncio.sleep(0.1)  # several members' Processors: no one event


async def test_two_instances_under_one_member_name_apply_each_partition_once_between_them(
    nats_server, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("grp.*",), partitions=PARTITIONS, partition_key=(1,))
    twins: list[tuple[GroupMember, asyncio.Task[Any], Connection]] = []
    try:
        for label in ("first", "second"):
            own = await connect(ConnectOptions(servers=(nats_server.url,)))
            member = GroupMember(
                own, STREAM, GROUP, _handler(label), ledger=_ledgers(tmp_path),
                options=GroupOptions(member="same", heartbeat=0.2, member_ttl=1),
                processor_options=FAST,
            )  # fmt: skip
            twins.append((member, asyncio.create_task(member.run()), own))
            await member.wait_running()
        first, second = twins[0][0], twins[1][0]
        await _until(lambda: first.partitions == ALL and second.partitions == ALL, "both run all")
        await _publish(conn, 0, 400)  # a pin comes with a message
        rows = await _wait_applied(tmp_path, 400, 30)
        _check(rows, 400)
        await _until(
            lambda: sorted(first.active + second.active) == ALL,
            "each partition applied by one of the two",
        )
        assert not set(first.active) & set(second.active)
        # The one applying stops cleanly: the other, standing by, takes its partitions.
        stopping, staying = (first, second) if first.active else (second, first)
        index = 0 if stopping is first else 1
        stopping.request_stop()
        await twins[index][1]
        await twins[index][2].close()
        twins.pop(index)
        await _publish(conn, 400, 400)
        rows = await _wait_applied(tmp_path, 800, 30)
        _check(rows, 800)
        await _until(lambda: staying.active == ALL, "the other applies every partition")
    finally:
        for member, task, own in twins:
            member.request_stop()
            await task
            await own.close()


async def test_a_ninth_member_over_eight_partitions_runs_none_until_another_leaves(
    conn: Connection, make_stream, group: Group, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("grp.*",), partitions=PARTITIONS, partition_key=(1,))
    names = [f"m{i}" for i in range(PARTITIONS + 1)]
    for name in names:
        await group.add(name)

    def counts() -> dict[str, int]:
        return {n: len(m.partitions) for n, (m, _, _) in group.members.items()}

    await _until(lambda: sorted(counts().values()) == [0] + [1] * PARTITIONS, "one each, one idle")
    [idle] = [n for n, c in counts().items() if c == 0]
    await _publish(conn, 0, 400)
    await _wait_spread(group, set(names) - {idle})
    rows = await _wait_applied(tmp_path, 400, 30)
    _check(rows, 400)
    assert idle not in {r[2] for r in rows}
    assert group.members[idle][0].partitions == [] and group.members[idle][0].active == []
    leaving = next(n for n in names if n != idle)
    await group.remove(leaving)
    await _until(lambda: counts()[idle] == 1, f"{idle} takes a partition after {leaving} left")
    await _publish(conn, 400, 400)
    await _wait_spread(group, set(names) - {leaving})
    rows = await _wait_applied(tmp_path, 800, 30)
    _check(rows, 800)
    assert idle in {r[2] for r in rows}


def _pg_handler(msg: Any, tx: Any) -> None:
    tx.execute("INSERT INTO effects (seq, subject) VALUES (%s, %s)", (msg.seq, msg.subject))


def _pg(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        cursor = con.execute(sql)
        return list(cursor) if cursor.description else []


@pytest.mark.postgres
async def test_a_shared_postgres_ledger_is_pruned_no_further_than_the_lowest_partition_floor(
    nats_server, conn: Connection, make_stream, postgres_url: str
) -> None:  # type: ignore[no-untyped-def]
    """docs/production.md, "The ledgers": in a shared ledger a partition's rows are pruned
    up to the lowest ack floor of the registered partitions' consumers."""
    await make_stream(STREAM, ("grp.*",), partitions=PARTITIONS, partition_key=(1,))
    _pg(postgres_url, "CREATE TABLE effects (seq BIGINT NOT NULL, subject TEXT NOT NULL)")

    async def run(static: tuple[int, int], pruning: bool) -> tuple[GroupMember, asyncio.Task[Any]]:
        options = (
            dataclasses.replace(FAST, prune_interval=0.2, prune_grace=0.1) if pruning else FAST
        )
        member = GroupMember(
            conn, STREAM, GROUP, _pg_handler, ledger=postgres_url,
            options=GroupOptions(member=f"s{static[0]}", static=static),
            processor_options=options,
        )  # fmt: skip
        task = asyncio.create_task(member.run())
        await member.wait_running()
        return member, task

    def applied() -> set[int]:
        return {int(r[0]) for r in _pg(postgres_url, "SELECT seq FROM effects")}

    # Every partition's consumer registered in the ledger, every message applied.
    member, task = await run((0, 1), pruning=False)
    await _publish(conn, 0, 80)
    await _until(lambda: len(applied()) == 80, "80 applied")
    member.request_stop()
    await task
    # From now on only the even partitions run (and prune); the odd ones' floors stay.
    member, task = await run((0, 2), pruning=True)
    try:
        await _publish(conn, 80, 80)
        odd = [
            await conn.consumer_info(STREAM, partition_consumer(GROUP, p))
            for p in range(1, PARTITIONS, 2)
        ]
        lowest = min(int(i["ack_floor"]["stream_seq"]) for i in odd)
        assert all(int(i["num_pending"]) for i in odd), "odd partitions have messages waiting"
        layout = Partitioning(subjects="grp.*", partitions=PARTITIONS, key=(1,))
        evens = sum(layout.partition_of(f"grp.k{i % 40}") % 2 == 0 for i in range(80, 160))
        assert 0 < evens < 80
        await _until(lambda: len(applied()) == 80 + evens, "the even partitions' messages")

        def kept() -> set[int]:
            return {int(r[0]) for r in _pg(postgres_url, "SELECT seq FROM oncestream_applied")}

        above = {s for s in applied() if s > lowest}
        await _until(lambda: not {s for s in kept() if s <= lowest}, f"pruned up to {lowest}")
        assert above <= kept(), f"rows above the lowest floor {lowest} pruned: {above - kept()}"
        for _ in range(10):  # a few more prune rounds (every 0.2 s): still none above it
            await asyncio.sleep(0.2)
            above = {s for s in applied() if s > lowest}
            assert above <= kept(), f"rows above the lowest floor {lowest} pruned"
    finally:
        member.request_stop()
        await task
