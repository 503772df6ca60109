"""3-node cluster, R3 stream with ``sync_interval: always``: SIGKILL a node mid-run.

No acknowledged message may be lost, none duplicated, and the killed node must
rejoin with its replicas current.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncestream import (
    Connection,
    ConnectOptions,
    MessageStream,
    OncestreamError,
    OperationTimeout,
    Processor,
    ProcessorOptions,
    PullOptions,
    SQLiteLedger,
    WrongLastSequence,
    connect,
    pull_messages,
)
from oncestream.publish import Publisher, PublisherOptions, SubjectLog
from oncestream.server import Cluster
from oncestream.server._internal import wait_for
from oncestream.streams import StreamSpec, ensure_stream
from tests._scenario import assert_exactly_once, publish_ids, stream_ids, wait_messages
from tests.handlers import record

N = 6000
STREAM = "ORDERS"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    topology = Cluster(tmp_path / "cluster", size=3, sync_interval="always")
    topology.up()
    try:
        yield topology
    finally:
        topology.down()


async def _create(conn: Connection) -> None:
    await ensure_stream(conn, StreamSpec(name=STREAM, subjects=("orders.>",), replicas=3))


async def _stream_leader(conn: Connection, timeout: float = 30.0) -> str:
    """The stream's leader, waiting (bounded) through a leader election."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return str((await conn.stream_info(STREAM))["cluster"]["leader"])
        except OperationTimeout:
            if time.monotonic() > deadline:
                raise


async def _assert_rejoined(cluster: Cluster, conn: Connection, node: str) -> float:
    """Restart ``node``; wait until the cluster and the stream see it current; seconds."""
    start = time.monotonic()
    cluster.start(node)
    cluster.wait_node_current(node)

    async def replicas_current() -> str | None:
        info = (await conn.stream_info(STREAM))["cluster"]
        peers = {r["name"]: r.get("current") for r in info.get("replicas") or []}
        peers[info["leader"]] = True
        return None if peers.get(node) and len(peers) == 3 else f"replicas {peers}"

    deadline = time.monotonic() + 60
    reason = await replicas_current()
    while reason is not None:
        assert time.monotonic() < deadline, f"{node} did not catch up: {reason}"
        await asyncio.sleep(0.1)
        reason = await replicas_current()
    return time.monotonic() - start


async def _publish_round(
    conn: Connection, ids: list[str], kill: Callable[[], None] | None
) -> list[str]:
    """Publish ``ids`` (calling ``kill`` a third of the way); return the ids not acked."""
    pub = Publisher(conn, PublisherOptions(stream=STREAM, ack_timeout=1.0, max_attempts=10))
    await pub.start()
    futures = []
    try:
        for n, msg_id in enumerate(ids):
            futures.append(await pub.publish(f"orders.{n % 7}", msg_id.encode(), msg_id=msg_id))
            if kill is not None and n == len(ids) // 3:
                await futures[-1]  # a third is acknowledged, the rest is in flight
                kill()
        results = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        try:
            await pub.close()
        except OncestreamError:
            pass  # the failures are in the futures' results
    errors = {f"{type(r).__name__}: {r}"[:200] for r in results if isinstance(r, BaseException)}
    if errors:
        print(f"publish round: {len(errors)} distinct errors, e.g. {sorted(errors)[:3]}")
    return [i for i, r in zip(ids, results, strict=True) if isinstance(r, BaseException)]


async def test_kill_stream_leader_during_publish(cluster: Cluster) -> None:
    conn = await connect(cluster.options(request_timeout=5))
    try:
        await _create(conn)
        victim = await _stream_leader(conn)
        ids = [f"o-{i}" for i in range(N)]
        start = time.monotonic()
        # The Publisher retries 503s and timeouts through the leader election
        # itself; what it still gives up on, the application re-publishes with
        # the same msg ids (the stream de-duplicates). Usually none is needed.
        failed = await _publish_round(conn, ids, cluster.servers[victim].kill)
        first_round_failed = len(failed)
        for _ in range(5):
            if not failed:
                break
            await _stream_leader(conn)
            failed = await _publish_round(conn, failed, None)
        elapsed = time.monotonic() - start
        assert not failed, f"{len(failed)} publishes never acknowledged"
        rejoin = await _assert_rejoined(cluster, conn, victim)
        assert_exactly_once(await stream_ids(conn, STREAM), ids)
        print(
            f"\ncluster: SIGKILLed stream leader {victim} after {N // 3} of {N} publishes; "
            f"{first_round_failed} needed an application retry; all {N} acked "
            f"in {elapsed:.2f}s, 0 lost, 0 duplicated; node rejoined and current in {rejoin:.2f}s"
        )
    finally:
        await conn.close()


def test_kill_node_during_spark_read(cluster: Cluster, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from oncestream._sync import run_sync

    ids = [f"s-{i}" for i in range(3000)]

    async def prepare() -> str:
        async with await connect(cluster.options()) as conn:
            await _create(conn)
            await publish_ids(conn, "orders.x", ids, stream=STREAM)
            await wait_messages(conn, STREAM, len(ids))
            return await _stream_leader(conn)

    victim = run_sync(prepare())
    out = tmp_path / "out"
    query = (
        spark.readStream.format("jetstream")
        .option("servers", ",".join(cluster.urls))
        .option("stream", STREAM)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "300")
        .option("retryTimeout", "60s")
        .load()
        .select("msg_id", "sequence")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    # The source itself rides through the leader election (planning and reads retry
    # timeouts and no-responders): this one query must finish, without any restart.
    try:
        wait_for(
            lambda: None if query.recentProgress or not query.isActive else "no micro-batch yet",
            timeout=120,
            what="the first micro-batch",
        )
        assert query.isActive, f"the query ended before the kill: {query.exception()}"
        killed_at = time.monotonic()
        cluster.servers[victim].kill()
        query.awaitTermination(240)
        ridden = time.monotonic() - killed_at
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, f"the query failed: {query.exception()}"
    batches = len(query.recentProgress)
    slowest = max(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress)

    async def rejoin() -> float:
        async with await connect(cluster.options()) as conn:
            return await _assert_rejoined(cluster, conn, victim)

    rejoined = run_sync(rejoin())
    rows = spark.read.parquet(str(out)).collect()
    assert_exactly_once([row.msg_id for row in rows], ids)
    print(
        f"\ncluster: SIGKILLed stream leader {victim} during a Spark read of {len(ids)} msgs "
        f"({batches} micro-batches, 0 query restarts; slowest trigger "
        f"{slowest / 1000:.1f}s; finished {ridden:.1f}s after the kill); "
        f"0 lost, 0 duplicated; node current again in {rejoined:.2f}s"
    )


@pytest.mark.soak
async def test_soak_kill_every_node_in_turn(cluster: Cluster) -> None:
    """Three rounds of 20k publishes; each round SIGKILLs the current stream leader."""
    conn = await connect(cluster.options(request_timeout=5))
    try:
        await _create(conn)
        all_ids: list[str] = []
        for round_no in range(3):
            victim = await _stream_leader(conn)
            ids = [f"soak-{round_no}-{i}" for i in range(20_000)]
            all_ids += ids
            failed = await _publish_round(conn, ids, cluster.servers[victim].kill)
            for _ in range(5):
                if not failed:
                    break
                await _stream_leader(conn)
                failed = await _publish_round(conn, failed, None)
            assert not failed
            await _assert_rejoined(cluster, conn, victim)
        assert_exactly_once(await stream_ids(conn, STREAM, timeout=180), all_ids)
    finally:
        await conn.close()


async def test_resend_answered_in_process_is_retried_not_failed(cluster: Cluster) -> None:
    """Found by the fault campaign (torture/, issue 11): with the stream's followers
    paused, the leader answers a re-send of an unacknowledged msg id with 10158
    "duplicate message id is in process". That is no outcome: the Publisher keeps
    re-sending, and once the followers are back the single stored copy is acked."""
    async with await connect(cluster.options()) as conn:
        await _create(conn)
        leader = await _stream_leader(conn)
    followers = [n for n in cluster.node_names if n != leader]
    async with await connect(ConnectOptions(servers=(cluster.url(leader),))) as conn:
        options = PublisherOptions(stream=STREAM, ack_timeout=0.3, max_attempts=100,
                                   retry_backoff=(0.05,))  # fmt: skip
        pub = Publisher(conn, options)
        await pub.start()
        for node in followers:
            cluster.servers[node].pause()
        try:
            fut = await pub.publish("orders.x", b"x", msg_id="in-process")
            # Without quorum nothing is acked: ~8 re-sends in 3 s, each answered 10158.
            await asyncio.wait([fut], timeout=3.0)
            assert not fut.done(), fut.exception()
            assert pub.stats.retried >= 2
        finally:
            for node in followers:
                cluster.servers[node].resume()
        ack = await asyncio.wait_for(fut, 30)
        assert ack.seq == 1
        assert (await conn.stream_info(STREAM))["state"]["messages"] == 1
        await pub.close()


async def test_processor_rides_through_its_consumer_without_responders(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Found by the fault campaign (torture/, seed 23, trials 1 and 3): a Processor
    raised ConsumerNotFound after 5 "no responders" answers to its pulls (~3.75 s)
    while its consumer still existed (between leaders, or its node cut off).

    Here an R1 consumer's node is SIGKILLed (its routes close at once, so every
    pull gets 503) for well over that: the Processor keeps running, asks
    CONSUMER.INFO (no answer: the node holding the consumer is down) and, once
    the node is back, applies every message exactly once. A second pull on the
    same consumer, stopped while its CONSUMER.INFO is in flight, stops at once."""
    n = 400
    async with await connect(cluster.options()) as admin:
        await _create(admin)
        config = {"durable_name": "w", "ack_policy": "explicit", "num_replicas": 1}
        await admin.api(f"CONSUMER.CREATE.{STREAM}.w", {"stream_name": STREAM, "config": config})
        host = str((await admin.consumer_info(STREAM, "w"))["cluster"]["leader"])
    other = next(node for node in cluster.node_names if node != host)
    ledger = SQLiteLedger(tmp_path / "ledger.db")
    options = ProcessorOptions(batch=50, expires=5, idle_heartbeat=0.5, prune_interval=0)
    conn = await connect(ConnectOptions(servers=(cluster.url(other),), request_timeout=2))
    slow = await connect(ConnectOptions(servers=(cluster.url(other),), request_timeout=30))
    proc = Processor(conn, STREAM, "w", record, ledger=ledger, options=options)
    run = asyncio.create_task(proc.run())
    probe: MessageStream | None = None
    try:
        js = conn.nc.jetstream()
        for i in range(n // 2):
            await js.publish("orders.x", b"%d" % i)
        await proc.wait_until(lambda s: s.applied >= n // 2, 30)
        cluster.servers[host].kill()
        probe = await pull_messages(
            slow, STREAM, "w", PullOptions(expires=5, idle_heartbeat=0.5)
        ).start()
        assert proc._loop is not None
        pull = proc._loop.pull  # the Processor's MessageStream (its counters)
        assert pull is not None

        async def without_responders(stream: MessageStream, count: int) -> None:
            deadline = time.monotonic() + 20
            while stream.no_responders_total < count or stream.consumer_checks < 1:
                assert not run.done(), f"the Processor ended: {run.exception()!r}"
                assert time.monotonic() < deadline, f"{stream.no_responders_total} no-responders"
                await asyncio.sleep(0.05)

        # 7 in a row is ~7.75 s without responders (the old limit was 5, ~3.75 s),
        # with at least one CONSUMER.INFO that could not be answered.
        await without_responders(pull, 7)
        await without_responders(probe, 5)
        assert not run.done(), f"the Processor ended: {run.exception()!r}"
        assert probe._check is not None  # CONSUMER.INFO in flight (30 s request timeout)
        check = probe._check
        began = time.monotonic()
        await probe.stop()
        assert time.monotonic() - began < 1.0 and check.done() and probe._check is None
        for i in range(n // 2, n):  # the R3 stream keeps quorum with 2 nodes
            await js.publish("orders.x", b"%d" % i)
        await asyncio.to_thread(cluster.start, host)
        await proc.wait_until(lambda s: s.applied >= n, 30)
        assert not run.done()
    finally:
        if probe is not None:
            await probe.stop()
        await proc.stop()
        await run
        await slow.close()
        await conn.close()
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        effects = [row[0] for row in db.execute("SELECT id FROM effects")]
    assert_exactly_once([str(e) for e in effects], [str(i) for i in range(n)])
    print(
        f"\ncluster: consumer host {host} down for {pull.no_responders_total} no-responders "
        f"answers ({pull.consumer_checks} CONSUMER.INFO checks); {n} applied exactly once"
    )


async def test_exclusive_append_refused_while_its_own_attempt_is_in_flight(
    cluster: Cluster,
) -> None:
    """Found by the seed-7 campaign (issue 20, trials 13 and 55): a replicated stream
    refuses an append with ``Nats-Expected-Last-Subject-Sequence`` (10164, "wrong last
    sequence" without a sequence) while another write to the subject is in flight,
    here the append's own first attempt, stuck without quorum. The subject still ends
    where the writer expected, so that is no rival: the append is asked again and,
    once the followers are back, its single stored copy is acked."""
    async with await connect(cluster.options()) as conn:
        await _create(conn)
        leader = await _stream_leader(conn)
    followers = [n for n in cluster.node_names if n != leader]
    async with await connect(ConnectOptions(servers=(cluster.url(leader),))) as conn:
        log = SubjectLog(conn, STREAM, "orders.log", ack_timeout=0.3, max_attempts=100)
        assert (await log.append(b"0", msg_id="rec-0")).seq == 1
        for node in followers:
            cluster.servers[node].pause()
        try:
            append = asyncio.create_task(log.append(b"1", msg_id="rec-1"))
            await asyncio.wait([append], timeout=2.0)
            assert not append.done(), append.exception()
        finally:
            for node in followers:
                cluster.servers[node].resume()
        ack = await asyncio.wait_for(append, 30)
        assert ack.seq == 2
        assert (await conn.stream_info(STREAM))["state"]["messages"] == 2
        await log.close()


async def test_exclusive_append_waits_out_a_write_in_flight(cluster: Cluster) -> None:
    """Found by the seed-7 campaign (issue 20, trials 13 and 55: a ProducerSession failed
    with "changed behind this session", err_code 10164, and its worker exited 1). A
    replicated stream's leader refuses an exclusive append (10164) while another write
    to the subject is in flight, here a write proposed without quorum. The subject
    still ends where the writer expected, so that is no rival's write yet: the append
    is asked again rather than failed. Once the write in flight is settled (the
    followers are back) the append fails only because that write landed, naming the
    sequence it took; the append's own record is not stored. The campaign of
    2026-11-30 (seed 52, trial 21; finding 30) saw such a write held 11 s, past the 8
    refusals (4.5 s) the append asked then: it asks for 15 s or its publisher's retry
    horizon now (the wait here, 7 s, failed with the old count)."""
    async with await connect(cluster.options()) as conn:
        await _create(conn)
        leader = await _stream_leader(conn)
    followers = [n for n in cluster.node_names if n != leader]
    conn = await connect(ConnectOptions(servers=(cluster.url(leader),)))
    try:
        log = SubjectLog(conn, STREAM, "orders.log", ack_timeout=1.0, max_attempts=30)
        assert (await log.append(b"0", msg_id="rec-0")).seq == 1
        for node in followers:
            cluster.servers[node].pause()
        try:
            # A rival write without quorum: in flight at the leader.
            await conn.nc.publish("orders.log", b"rival", headers={"Nats-Msg-Id": "rival"})
            append = asyncio.create_task(log.append(b"1", msg_id="rec-1"))
            # Refused (10164) and asked again, past the 8 refusals (4.5 s) that ended it
            # before: an end that must not come, so a bounded wait for it.
            await asyncio.wait([append], timeout=7.0)
            assert not append.done(), append.exception()
        finally:
            for node in followers:
                cluster.servers[node].resume()
        with pytest.raises(WrongLastSequence, match="wrong last sequence: 2"):
            await asyncio.wait_for(append, 60)
        assert sorted(await stream_ids(conn, STREAM)) == ["rec-0", "rival"]
        await log.close()
    finally:
        await conn.close()
