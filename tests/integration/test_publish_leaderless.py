"""A stream without a leader past the retry horizon is an outage, not a missing stream.

nats-server answers a JetStream publish with "503 no responders" both when no stream
captures the subject and when the stream that does has no leader: only a stream's
leader subscribes to its subjects (``stream.setLeader``). Found by the fault campaign
(R3, two of three nodes down for longer than the retry horizon): the Publisher failed
such publishes with ``StreamNotFound``, and ``oncestream publish`` exited 2 ("fix
--subject"), once naming the same stream twice, although a re-run resumes exactly.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.aio.msg
import orjson
import pytest
from typer.testing import CliRunner

from oncestream import (
    Connection,
    ConnectOptions,
    NoResponders,
    Publisher,
    PublisherOptions,
    PublishFailed,
    StreamNotFound,
    connect,
)
from oncestream.cli import app
from oncestream.cli._app import exit_code_for
from oncestream.load._plan import refused_subject
from oncestream.load._run import Tally
from oncestream.publish import AtomicPublisher, ProducerSession
from oncestream.server import Cluster, monitor
from oncestream.streams import StreamSpec, ensure_stream
from tests._wiretap import WireTap
from tests.integration.test_atomic_publisher import until
from tests.integration.test_publisher import read_back

STREAM = "T"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    topology = Cluster(tmp_path / "cluster", size=3, sync_interval=None)
    topology.up()
    try:
        yield topology
    finally:
        topology.down()


async def _r3_stream_and_survivor(cluster: Cluster, **spec: Any) -> tuple[str, list[str]]:
    """Create the R3 stream (``spec``: more StreamSpec fields); the node to keep (neither
    its leader nor the meta leader) and the others.

    Killing the other two leaves the survivor a follower of both groups: it holds no
    subscription for the stream's subjects (a publish gets "no responders") and, not
    the meta leader, it does not answer ``STREAM.NAMES``. A leader killed in place
    (SIGKILL) hands nothing over, as in the campaign's crashes.
    """
    async with await connect(cluster.options()) as conn:
        # Without fast-ingest batches (a stream created by anyone else): every attempt of a
        # publish goes on the ack path, where the 503s are counted.
        config = StreamSpec(name=STREAM, subjects=("t.>",), replicas=3, allow_batched=False, **spec)
        await ensure_stream(conn, config)
        info = await conn.stream_info(STREAM)
        stream_leader = info["cluster"]["leader"]
    meta = (monitor(cluster.http_ports[stream_leader], "/jsz") or {}).get("meta_cluster") or {}
    leaders = {stream_leader, meta.get("leader")}
    survivor = next(node for node in cluster.node_names if node not in leaders)
    return survivor, [node for node in cluster.node_names if node != survivor]


def _kill(cluster: Cluster, nodes: list[str]) -> None:
    for node in nodes:
        cluster.servers[node].kill()


async def _isolate(cluster: Cluster, survivor: str, others: list[str]) -> None:
    """Kill ``others`` and return once ``survivor`` has dropped its routes to them.

    Until then it still holds the dead leader's interest in the stream's subjects and
    forwards a publish into the closed route: no answer at all (a lost ack), not the
    "no responders" a test of the 503 path counts (seen once in CI).
    """
    _kill(cluster, others)

    async def no_routes() -> bool:
        routez = await asyncio.to_thread(monitor, cluster.http_ports[survivor], "/routez")
        return routez is not None and routez.get("num_routes", 0) == 0

    await until(no_routes, f"{survivor} to drop its routes")


async def test_a_publish_to_a_leaderless_stream_fails_retryable_not_stream_not_found(
    cluster: Cluster,
) -> None:
    survivor, others = await _r3_stream_and_survivor(cluster)
    async with await connect(ConnectOptions(servers=(cluster.url(survivor),))) as conn:
        options = PublisherOptions(stream=STREAM, ack_timeout=0.3, max_attempts=3)
        async with Publisher(conn, options) as pub:
            first = await (await pub.publish("t.cli", b"1", msg_id="1"))
            assert first.stream == STREAM and not first.duplicate
            await _isolate(cluster, survivor, others)
            future = await pub.publish("t.cli", b"2", msg_id="2")
            with pytest.raises((PublishFailed, StreamNotFound)) as caught:
                await asyncio.wait_for(future, timeout=20)
    error = caught.value
    assert not isinstance(error, StreamNotFound), error
    assert isinstance(error, PublishFailed), error
    assert error.msg_id == "2" and error.attempts == 3
    assert f"stream {STREAM!r}" in str(error) and "retried" in str(error), error
    cause = error.__cause__
    assert isinstance(cause, NoResponders) and cause.code == 503 and cause.transient, cause
    assert exit_code_for(error) == 1  # the work failed: re-run, not bad usage


async def test_cli_publish_through_a_leaderless_outage_exits_1_and_says_re_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    survivor, others = await _r3_stream_and_survivor(cluster)
    total = 400
    path = tmp_path / "t.jsonl"
    path.write_text("".join(orjson.dumps({"id": f"r{i}"}).decode() + "\n" for i in range(total)))
    args = ["publish", str(path), "--stream", STREAM, "--subject", "t.cli", "--id-field", "id",
            "-s", cluster.url(survivor), "--no-progress", "--rate", "40",
            "--ack-timeout", "300ms", "--max-attempts", "3"]  # fmt: skip
    async with await connect(ConnectOptions(servers=(cluster.url(survivor),))) as conn:
        seen = asyncio.Event()
        count = 0

        async def on_record(_msg: nats.aio.msg.Msg) -> None:
            nonlocal count
            count += 1
            if count >= 10:
                seen.set()

        watch = await conn.nc.subscribe("t.cli", cb=on_record)
        run = asyncio.ensure_future(asyncio.to_thread(CliRunner().invoke, app, args))
        await asyncio.wait_for(seen.wait(), timeout=20)  # the run is publishing
        # Unsubscribed before the outage: an interest in the subject is a responder.
        await watch.unsubscribe()
        await conn.flush()
        assert not run.done()  # 400 records at 40/s: it publishes for 10 s
        _kill(cluster, others)
        result = await asyncio.wait_for(run, timeout=60)
    flat = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "resume: re-run the same command" in flat, result.output
    assert "fix --subject" not in flat and "not by --stream" not in flat, result.output
    assert "StreamNotFound" not in flat, result.output


async def test_a_refusal_of_a_subject_the_target_captures_is_not_called_a_wrong_subject(
    conn: Connection, make_stream
) -> None:
    """The loader's "captured by stream X, not by --stream Y" needs X != Y: when the target
    captures the refused subject by the time it is looked up, the refusal was transient."""
    await make_stream(STREAM, ("t.>",))
    await make_stream("OTHER", ("o.>",))
    tally = Tally(fatal=StreamNotFound("no stream listens", code=503), fatal_subject="t.cli")
    assert await refused_subject(conn, STREAM, tally) is None
    tally.fatal_subject = "o.cli"
    said = await refused_subject(conn, STREAM, tally)
    assert said is not None and "captured by stream 'OTHER', not by LoadOptions.stream 'T'" in said
    tally.fatal_subject = "nowhere.cli"
    said = await refused_subject(conn, STREAM, tally)
    assert said is not None and "captured by no stream" in said


async def test_a_subject_no_stream_captures_still_fails_with_stream_not_found(
    conn: Connection, make_stream
) -> None:
    """On a healthy server the lookup says no stream captures it: StreamNotFound, exit 2,
    on the last attempt (max_attempts=1) as on an early one."""
    await make_stream(STREAM, ("t.>",))
    for attempts in (1, 3):
        options = PublisherOptions(ack_timeout=0.3, max_attempts=attempts)
        async with Publisher(conn, options) as pub:
            future = await pub.publish("nowhere.cli", b"x", msg_id=f"n{attempts}")
            with pytest.raises(StreamNotFound, match=r"nowhere\.cli") as caught:
                await asyncio.wait_for(future, timeout=10)
        assert caught.value.code == 503
        assert exit_code_for(caught.value) == 2


def _failed_for_no_leader(error: BaseException, attempts: int) -> None:
    """A publish that met a stream without a leader on every attempt: retryable, not missing."""
    assert not isinstance(error, (StreamNotFound, NoResponders)), repr(error)
    assert isinstance(error, PublishFailed), repr(error)
    assert error.attempts == attempts, error  # every attempt was made, none cut short
    assert f"stream {STREAM!r}" in str(error) and "no responders" in str(error).lower(), error
    cause = error.__cause__
    assert isinstance(cause, NoResponders) and cause.code == 503 and cause.transient, cause
    assert exit_code_for(error) == 1


async def test_atomic_batches_to_a_leaderless_stream_are_retried_then_fail_retryable(
    cluster: Cluster,
) -> None:
    """The Spark sink's ingest=atomic (AtomicPublisher) and a batching ProducerSession: a
    batch commit answered "no responders" was stored nowhere, so it is sent again, up to
    max_attempts, and then fails as an outage, not as a missing stream."""
    survivor, others = await _r3_stream_and_survivor(cluster, allow_atomic=True)
    async with await connect(ConnectOptions(servers=(cluster.url(survivor),))) as conn:
        # The 503 comes at once, yet CI saw an ack time out at 0.3 s and once at 1 s: a lost
        # ack (settled by probes), not the re-send this test counts. 3 s costs ~4 s of waits.
        options = PublisherOptions(stream=STREAM, ack_timeout=3.0, max_attempts=3)
        atomic = AtomicPublisher(conn, options, chunk_size=10)
        session = ProducerSession(
            conn, stream=STREAM, subject_prefix="t.src", producer_id="p1", options=options,
            batch_size=10,
        )  # fmt: skip
        await atomic.start()
        await session.start()  # both read the stream while it has a leader
        await _isolate(cluster, survivor, others)

        async def ten_records() -> None:
            for position in range(10):  # the tenth commits the batch
                await session.publish(position, b"x")

        try:
            await atomic.publish(["t.atomic"] * 10, [b"x"] * 10, [f"a{i}" for i in range(10)])
            chunk, batch = await asyncio.wait_for(
                asyncio.gather(atomic.flush(), ten_records(), return_exceptions=True), timeout=30
            )
        finally:
            await atomic.close()
            await session.close()
    assert isinstance(chunk, BaseException) and isinstance(batch, BaseException), (chunk, batch)
    _failed_for_no_leader(chunk, attempts=3)
    _failed_for_no_leader(batch, attempts=3)
    assert atomic.stats.resent == 2 and atomic.stats.stored == 0, atomic.stats


async def test_atomic_batches_to_a_subject_no_stream_captures_fail_with_stream_not_found(
    conn: Connection, make_stream
) -> None:
    """The same 503 on a healthy server that lists no stream for the subject: at once."""
    await make_stream(STREAM, ("t.>",), allow_atomic=True)
    options = PublisherOptions(stream=STREAM, ack_timeout=0.3, max_attempts=3)
    atomic = AtomicPublisher(conn, options, chunk_size=10)
    try:
        await atomic.publish(["nowhere.a"] * 2, [b"x"] * 2, ["n1", "n2"])
        with pytest.raises(StreamNotFound, match=r"nowhere\.a") as caught:
            await asyncio.wait_for(atomic.flush(), timeout=10)
    finally:
        await atomic.close()
    assert caught.value.code == 503 and atomic.stats.resent == 0
    session = ProducerSession(
        conn, stream=STREAM, subject_prefix="nowhere", producer_id="p1", options=options,
        batch_size=2,
    )  # fmt: skip
    await session.start()
    try:
        await session.publish(1, b"x")
        with pytest.raises(StreamNotFound, match=r"nowhere\.p1") as caught:
            await asyncio.wait_for(session.publish(2, b"x"), timeout=10)
    finally:
        await session.close()
    assert caught.value.code == 503 and exit_code_for(caught.value) == 2


async def test_a_batch_whose_ack_was_lost_with_the_leader_is_settled_when_one_is_back(
    cluster: Cluster,
) -> None:
    """A settle probe answered "no responders" settles nothing. The batch's commit ack is
    lost with the two servers that stored it; the survivor (paused while they did) has
    no leader and not the batch. Its probes are answered 503 until the two are back, past
    the 1 s window: then a leader answers, the batch is read back as stored, not re-sent."""
    survivor, others = await _r3_stream_and_survivor(
        cluster, allow_atomic=True, duplicate_window=1.0
    )
    ids = [f"s{i}" for i in range(100)]
    with WireTap(cluster.client_ports[others[0]]) as tap:
        client = await connect(ConnectOptions(servers=(tap.url(),), reconnect_wait=0.05))
        options = PublisherOptions(stream=STREAM, ack_timeout=0.3, max_attempts=40)
        pub = AtomicPublisher(client, options, chunk_size=100)
        await pub.start()
        watcher = await connect(ConnectOptions(servers=(cluster.url(others[0]),)))
        try:

            async def stored_by_the_two() -> bool:
                info = await watcher.stream_info(STREAM)
                return int(info["state"]["messages"]) == len(ids)

            cluster.servers[survivor].pause()  # it misses the batch
            tap.hold(replies=True)  # and the client its commit ack
            await pub.publish(["t.settle"] * len(ids), [b"x"] * len(ids), ids)
            flushed = asyncio.ensure_future(pub.flush())
            await until(stored_by_the_two, "the stream's leader and one follower storing it")
            _kill(cluster, others)  # the commit ack dies with them (and the connection)
            tap.upstream = cluster.client_ports[survivor]
            tap.cut()
            tap.release()
            cluster.servers[survivor].resume()
            stored_at = time.monotonic()
            await until(lambda: _true(pub.stats.lost_acks >= 1), "the ack timeout")
            # Past the window, so that only the read-back keeps the batch once.
            await asyncio.sleep(max(0.0, stored_at + 1.3 - time.monotonic()))
            assert not flushed.done(), flushed  # the 503s decided nothing
            await asyncio.gather(*(asyncio.to_thread(cluster.start, node) for node in others))
            stats = await asyncio.wait_for(flushed, timeout=30)
        finally:
            cluster.servers[survivor].resume()
            await pub.close()
            await client.close()
            await watcher.close()
    assert stats.stored == len(ids) and stats.resent == 0, stats
    async with await connect(cluster.options()) as conn:
        counts = Counter(m.msg_id for m in await read_back(conn, STREAM))
    assert counts == Counter(ids), {k: v for k, v in counts.items() if v != 1}


async def _true(value: bool) -> bool:
    return value
