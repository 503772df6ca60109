"""Reads that decide what to publish come from the stream's leader, not a replica behind it.

Found by the fault campaign (R3, node pauses and restarts): a restarted
``ProducerSession``, the only writer of its subject, failed its first publish with
``WrongLastSequence`` ("changed behind this session (expected its last message at
seq 82)"). It had read its resume point with a direct get, which nats-server lets
every replica of a stream with ``allow_direct`` answer from its own store (the
replicas that caught up once join a queue group, ``processDirectGetRequest`` in
``server/stream.go``; one member answers each request). A replica that has not
applied the newest records answers with an older last record: the session resumes
too early, and its next publish, expecting that older sequence, is refused by the
leader.

Here the replica is made to lag for certain: the session's connection reaches it
through a relay that pauses it (SIGSTOP) just before the read of the last record
is forwarded; the other nodes close their routes to it (stale: short ping
intervals) and the earlier run of the producer writes more (the other two nodes
are a quorum). Resumed, the replica serves the read waiting in its socket at
once, while its routes, and with them what it missed, take a reconnect to return.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from oncestream import Connection, ConnectOptions, connect
from oncestream.publish import ProducerSession, PublisherOptions
from oncestream.server import Cluster, monitor
from oncestream.streams import StreamSpec, ensure_stream
from tests.integration.test_atomic_publisher import until
from tests.integration.test_break_startup import PauseAt

STREAM = "T"
SUBJECT = "t.sess"
OPTIONS = PublisherOptions(ack_timeout=2.0, max_attempts=3)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    topology = Cluster(tmp_path / "cluster", size=3, sync_interval="always")
    for server in topology:
        # A paused node's routes are closed as stale within 1.5 s (by default after
        # 2 pings unanswered at intervals of up to 30 s).
        server.config = replace(server.config, extra={"ping_interval": "500ms", "ping_max": 2})
    topology.up()
    try:
        yield topology
    finally:
        topology.down()


async def _stream_and_replica(cluster: Cluster) -> tuple[str, str]:
    """Create the R3 stream; its leader and a replica that serves direct gets.

    The replica is neither the stream's leader nor the meta leader (pausing it
    starts no election). Replicas join the direct-get queue group once current
    (checked every 2 s by nats-server's stream monitor): awaited on its ``/subsz``.
    """
    async with await connect(cluster.options()) as conn:
        spec = StreamSpec(name=STREAM, subjects=("t.>",), replicas=3, allow_batched=False)
        await ensure_stream(conn, spec)
        leader = (await conn.stream_info(STREAM))["cluster"]["leader"]
    meta = (monitor(cluster.http_ports[leader], "/jsz") or {}).get("meta_cluster") or {}
    replica = next(n for n in cluster.node_names if n not in {leader, meta.get("leader")})
    direct = f"$JS.API.DIRECT.GET.{STREAM}"

    async def serves_direct_gets() -> bool:
        subs = monitor(cluster.http_ports[replica], f"/subsz?subs=1&test={direct}") or {}
        return any(s.get("subject") == direct for s in subs.get("subscriptions_list") or [])

    await until(serves_direct_gets, f"{replica} to serve direct gets of {STREAM}")
    return leader, replica


def _routes_to(cluster: Cluster, node: str, peer: str) -> bool:
    routez = monitor(cluster.http_ports[node], "/routez") or {}
    return any(r.get("remote_name") == peer for r in routez.get("routes") or [])


async def _records_on_subject(conn: Connection) -> int:
    """How many messages the leader holds on the session's subject."""
    info = await conn.api(f"STREAM.INFO.{STREAM}", {"subjects_filter": SUBJECT})
    return int((info["state"].get("subjects") or {}).get(SUBJECT, 0))


async def test_a_session_resumes_from_the_leader_not_from_a_replica_behind_it(
    cluster: Cluster,
) -> None:
    leader, replica = await _stream_and_replica(cluster)
    relay = PauseAt(cluster.servers[replica], b'"last_by_subj"')
    conn = await connect(ConnectOptions(servers=(cluster.url(leader),)))
    try:
        earlier = ProducerSession(
            conn, stream=STREAM, subject_prefix="t", producer_id="sess", options=OPTIONS
        )
        assert await earlier.start() is None
        await earlier.run([(position, b"%d" % position) for position in range(1, 6)])

        # The read must outlast the pause (the default request timeout, 5 s, does).
        async with await connect(ConnectOptions(servers=(relay.url,))) as through_replica:
            session = ProducerSession(
                through_replica, stream=STREAM, subject_prefix="t", producer_id="sess",
                options=OPTIONS,
            )  # fmt: skip
            starting = asyncio.ensure_future(session.start())
            await relay.wait_fired()  # the replica is paused, the read in its socket
            others = [node for node in cluster.node_names if node != replica]

            async def cut_off() -> bool:
                return not any(_routes_to(cluster, node, replica) for node in others)

            await until(cut_off, f"the routes to the paused {replica} to close")
            # The earlier run stores five more records, then stops: a restart's resume
            # point is after position 10.
            await earlier.run([(position, b"%d" % position) for position in range(6, 11)])
            stored_last = earlier.last_seq
            await earlier.close()
            cluster.servers[replica].resume()

            resume = await asyncio.wait_for(starting, timeout=30)
            assert (resume, session.last_seq) == (10, stored_last), (
                "the session resumed from a replica that had not applied the last records"
            )
            ack = await session.publish(11, b"11")
            assert ack is not None and ack.seq > stored_last and not ack.duplicate
            await session.close()
        assert await _records_on_subject(conn) == 11  # positions 1..11, each once
    finally:
        relay.close()
        await conn.close()
