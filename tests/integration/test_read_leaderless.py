"""A read is never bounded by the state of a replica that answers for a leaderless stream.

While a replicated stream has no leader, each of its servers answers ``STREAM.INFO``
with its own state (nats-server ``jsStreamInfoRequest``). Found by the fault campaign
(seed 52, trial 15): right after a whole-cluster restart ``oncestream dlq replay`` was
answered by a replica whose store had been wiped, read up to its ``last_seq`` 0 and
said "replayed 0 dead letters" with 94 in the stream. Here the replica is behind
because it was down while the others stored the messages; they are then killed and
it is started again: the only server up, the group without a leader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream import ConnectOptions, JetStreamError, OperationTimeout, connect
from oncestream._retry import leaderless
from oncestream.read import iter_messages, read_stream
from oncestream.server import Cluster
from oncestream.streams import StreamSpec, ensure_stream
from tests.integration.test_atomic_publisher import until

STREAM, COUNT = "T", 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Five servers: with two of an R3 stream's three down, the meta group keeps its quorum
    and the third replica answers for the stream (as after the campaign's restart)."""
    topology = Cluster(tmp_path / "cluster", size=5, sync_interval=None)
    topology.up()
    try:
        yield topology
    finally:
        topology.down()


async def _behind_and_alone(cluster: Cluster) -> str:
    """A replica restarted without the stream's messages, the only one of the three up."""
    async with await connect(cluster.options()) as conn:
        spec = StreamSpec(name=STREAM, subjects=("t.>",), replicas=3, allow_direct=True)
        await ensure_stream(conn, spec)
        group = (await conn.stream_info(STREAM))["cluster"]
    peers = [r["name"] for r in group.get("replicas") or ()]
    survivor, others = peers[0], [group["leader"], *peers[1:]]
    cluster.servers[survivor].kill()  # it misses what the other two store
    async with await connect(ConnectOptions(servers=(cluster.url(others[0]),))) as conn:
        for i in range(COUNT):
            await conn.nc.publish(f"t.x{i}", b"x")
        await conn.nc.flush()

        async def stored() -> bool:
            info = await conn.stream_info(STREAM)
            return int(info["state"]["messages"]) == COUNT

        await until(stored, "the leader and one follower storing the messages")
    for node in others:
        cluster.servers[node].kill()
    cluster.start(survivor)
    return survivor


async def test_a_read_waits_for_a_leader_instead_of_reading_a_replica_behind(
    cluster: Cluster,
) -> None:
    survivor = await _behind_and_alone(cluster)
    async with await connect(ConnectOptions(servers=(cluster.url(survivor),))) as conn:
        seen: dict[str, Any] = {}

        async def answers_alone() -> bool:
            try:
                seen["info"] = await conn.stream_info(STREAM)
            except (OperationTimeout, JetStreamError):
                return False  # still starting, or still believing in the old leader
            return leaderless(seen["info"])

        await until(answers_alone, "the survivor answering for the leaderless stream", 30)
        # The premise: the answer is the replica's own state, which is behind.
        assert int(seen["info"]["state"]["last_seq"]) == 0, seen["info"]["state"]

        read: list[Any] = []
        with pytest.raises(OperationTimeout, match="has no leader") as caught:
            async for msg in iter_messages(conn, STREAM, patience=1.0):
                read.append(msg)
        assert read == [] and "last_seq 0" in str(caught.value), caught.value
        with pytest.raises(OperationTimeout, match="has no leader"):
            async for _ in read_stream(conn, STREAM, timeout=1.0):
                pass
