"""`oncestream publish`'s progress records under cluster faults (found by the fault campaign,
issue 20): neither a lost PubAck of its own progress write nor a replica's stale
``STREAM.INFO`` may stop a run as bad usage (exit 2)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from harness import publish_n
from oncestream import (
    Connection,
    ConnectOptions,
    OncestreamError,
    Publisher,
    StreamNotFound,
    connect,
)
from oncestream._errors import ConfigError
from oncestream.cli import app
from oncestream.cli._app import exit_code_for
from oncestream.load import LoadObserver, LoadOptions, LoadStart, load
from oncestream.load._input import PrefixHasher, SubjectTemplate, file_facts
from oncestream.load._plan import plan_resume
from oncestream.load._progress import (
    PROGRESS_STREAM,
    ConcurrentRun,
    ProgressStore,
    PublishProgress,
    progress_key,
)
from oncestream.publish import PublisherOptions, SubjectLog
from oncestream.read import stored_ids
from oncestream.server import NatsServer
from tests.integration.test_publisher import read_back


def _record(run: str, line: int) -> PublishProgress:
    return PublishProgress(
        stream="ORDERS",
        stream_created="2026-01-01T00:00:00Z",
        file="/data/orders.jsonl",
        sha256="0" * 64,
        size=100,
        subject="orders.x",
        ids="field:id",
        line=line,
        scan_from=line,
        reserved=line + 10,
        done=False,
        run=run,
    )


async def test_own_progress_write_stored_without_its_pub_ack_is_not_a_concurrent_run(
    nats_server: NatsServer, conn: Connection
) -> None:
    key = progress_key("ORDERS", "/data/orders.jsonl")
    store = ProgressStore(conn, PROGRESS_STREAM, key)
    await store.ensure()
    assert await store.last() is None
    await store.write(_record("a", 1))
    # A write of this same run stored while its PubAck was lost (a background snapshot
    # during a partition): `store` still expects the subject at its own last write.
    async with await connect(ConnectOptions(servers=(nats_server.url,))) as other_conn:
        twin = ProgressStore(other_conn, PROGRESS_STREAM, key)
        await twin.last()
        await twin.write(_record("a", 2))
        await store.write(_record("a", 3))  # was: ConcurrentRun, exit 2
        assert await twin.last() == _record("a", 3)
        # Another run writing in between still is a concurrent run.
        other = ProgressStore(other_conn, PROGRESS_STREAM, key)
        await other.last()
        await other.write(_record("b", 4))
        with pytest.raises(ConcurrentRun, match="another publish"):
            await store.write(_record("a", 5))


async def test_a_stale_stream_info_of_the_same_stream_is_a_failure_to_retry_not_bad_usage(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path
) -> None:
    await make_stream("ORDERS", ("orders.>",))
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(orjson.dumps({"id": f"o{i}"}).decode() + "\n" for i in range(5)))
    args = ["publish", str(path), "--stream", "ORDERS", "--subject", "orders.x",
            "--id-field", "id", "-s", nats_server.url, "--no-progress"]  # fmt: skip
    first = await asyncio.to_thread(CliRunner().invoke, app, args)  # it runs its own loop
    assert first.exit_code == 0, first.output
    with path.open("a") as f:  # a resumable run: lines after the published ones
        f.write(orjson.dumps({"id": "o5"}).decode() + "\n")
    info = await conn.stream_info("ORDERS")
    assert info["state"]["last_seq"] == 5

    async def plan(stream_info: dict[str, object]) -> object:
        with path.open("rb") as source:
            hasher = PrefixHasher(str(path))
            try:
                return await plan_resume(
                    conn,
                    info=stream_info,
                    facts=file_facts(str(path), source),
                    template=SubjectTemplate("orders.x"),
                    ids="field:id",
                    progress_stream=PROGRESS_STREAM,
                    fresh=False,
                    run="second",
                    hasher=hasher,
                )
            finally:
                hasher.close()

    resumed = await plan(info)
    assert getattr(resumed, "skip_to", None) == 5
    # What a replica that has not caught up answers while the stream has no leader:
    # the same stream (same creation time), an older last sequence.
    stale = copy.deepcopy(info)
    stale["state"] |= {"last_seq": 0, "messages": 0, "first_seq": 0}
    with pytest.raises(OncestreamError, match="a replica answered") as caught:
        await plan(stale)
    assert not isinstance(caught.value, ConfigError)
    assert exit_code_for(caught.value) == 1  # the work failed: re-run, not a usage error


async def test_a_store_failure_creating_the_progress_stream_exits_1_not_2(
    nats_server: NatsServer, make_stream, tmp_path: Path
) -> None:
    """A server that cannot create the progress stream's store (the campaign's full disk,
    seed 11 trial 0) is failed work to re-run, exit 1; before, exit 2 as a config error."""
    await make_stream("ORDERS", ("orders.>",))
    # A file where the stream's directory must go: the server's store set-up fails, as it
    # does on a full disk, whoever runs the test.
    streams = tmp_path / "nats" / "jetstream" / "jetstream" / "$G" / "streams"
    streams.mkdir(parents=True, exist_ok=True)
    (streams / PROGRESS_STREAM).write_text("not a directory\n")
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(orjson.dumps({"id": f"o{i}"}).decode() + "\n" for i in range(3)))
    args = ["publish", str(path), "--stream", "ORDERS", "--subject", "orders.x",
            "--id-field", "id", "-s", nats_server.url, "--no-progress"]  # fmt: skip
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 1, result.output
    assert f"cannot create the progress stream '{PROGRESS_STREAM}'" in result.output
    assert "re-run" in result.output


#: Longer than the connection's request timeout below, shorter than the run's retry horizon.
_PAUSE = 2.5


def _resume_after_pause(server: NatsServer) -> asyncio.TimerHandle:
    server.pause()
    return asyncio.get_running_loop().call_later(_PAUSE, server.resume)


@contextlib.contextmanager
def _paused(server: NatsServer) -> Iterator[None]:
    """The server paused for ``_PAUSE`` seconds as the block starts; resumed by its end."""
    timer = _resume_after_pause(server)
    try:
        yield
    finally:
        timer.cancel()
        server.resume()


class _PauseAtFirstReservation(LoadObserver):
    """Pauses the server as publishing begins: the next request is the progress record's."""

    def __init__(self, server: NatsServer) -> None:
        self.server = server
        self.timer: asyncio.TimerHandle | None = None

    def publishing(self, start: LoadStart) -> None:
        self.timer = _resume_after_pause(self.server)


async def test_a_pause_at_the_first_progress_reservation_is_ridden_out(
    nats_server: NatsServer, make_stream, tmp_path: Path
) -> None:
    """Found by the fault campaign (trial 53): a leader stalled as the run wrote its first
    progress record; the record's publisher timed out on its one STREAM.INFO and the run
    stopped (exit 1, nothing stored) although its publishes ride such a pause out."""
    await make_stream("ORDERS", ("orders.>",), duplicate_window=60)
    total = 300
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(orjson.dumps({"id": f"o{i}"}).decode() + "\n" for i in range(total)))
    options = LoadOptions(
        stream="ORDERS",
        subject="orders.x",
        id_field="id",
        publisher=PublisherOptions(ack_timeout=1.0, max_attempts=10),
    )
    observer = _PauseAtFirstReservation(nats_server)
    quick = ConnectOptions(servers=(nats_server.url,), request_timeout=1.0)
    async with await connect(quick) as conn:
        try:
            result = await load(conn, str(path), options, observer=observer)
        finally:
            if observer.timer is not None:
                observer.timer.cancel()
                nats_server.resume()
        assert observer.timer is not None  # the pause happened
        assert result.complete and result.stored == total, result
        ids = [m.msg_id for m in await read_back(conn, "ORDERS")]
    assert sorted(ids) == sorted(f"o{i}" for i in range(total))


async def test_progress_requests_at_start_ride_out_a_pause(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Looking up (and creating) the progress stream, reading the last record and the
    first write each retry a paused server within the store's horizon (1 s x 10)."""
    quick = ConnectOptions(servers=(nats_server.url,), request_timeout=1.0)
    async with await connect(quick) as conn:
        store = ProgressStore(conn, PROGRESS_STREAM, "k", ack_timeout=1.0, max_attempts=10)
        try:
            with _paused(nats_server):
                await store.ensure()
            with _paused(nats_server):
                assert await store.last() is None
            with _paused(nats_server):
                await store.write(_record("run-1", 5))
            last = await store.last()
        finally:
            await store.close()
    assert last is not None and (last.run, last.line) == ("run-1", 5)


async def test_the_target_check_at_start_rides_out_a_pause(
    nats_server: NatsServer, make_stream, tmp_path: Path
) -> None:
    """The load's first requests (the target's STREAM.INFO and STREAM.NAMES) retry a
    paused server within the run's patience, as its publishes do; before, the first
    request timed out and the run stopped with nothing stored."""
    await make_stream("ORDERS", ("orders.>",), duplicate_window=60)
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(orjson.dumps({"id": f"o{i}"}).decode() + "\n" for i in range(50)))
    options = LoadOptions(
        stream="ORDERS",
        subject="orders.x",
        id_field="id",
        publisher=PublisherOptions(ack_timeout=1.0, max_attempts=10),
    )
    quick = ConnectOptions(servers=(nats_server.url,), request_timeout=1.0)
    async with await connect(quick) as conn:
        with _paused(nats_server):
            result = await load(conn, str(path), options)
        assert result.complete and result.stored == 50, result
        ids = [m.msg_id for m in await read_back(conn, "ORDERS")]
    assert sorted(ids) == sorted(f"o{i}" for i in range(50))


async def test_a_publisher_start_rides_out_a_pause(nats_server: NatsServer, make_stream) -> None:
    """``Publisher.start``'s STREAM.INFO (the window guard) retries a paused server for
    ``ack_timeout x max_attempts``; a missing stream still fails at once."""
    await make_stream("ORDERS", ("orders.>",), duplicate_window=60)
    quick = ConnectOptions(servers=(nats_server.url,), request_timeout=1.0)
    async with await connect(quick) as conn:
        pub = Publisher(conn, PublisherOptions(stream="ORDERS", ack_timeout=1.0, max_attempts=10))
        with _paused(nats_server):
            await pub.start()
        try:
            ack = await (await pub.publish("orders.x", b"{}", msg_id="a"))
            assert ack.stream == "ORDERS" and not ack.duplicate
        finally:
            await pub.close()
        missing = Publisher(conn, PublisherOptions(stream="NOPE", ack_timeout=1.0, max_attempts=10))
        started = asyncio.get_running_loop().time()
        with pytest.raises(StreamNotFound):
            await missing.start()
        assert asyncio.get_running_loop().time() - started < 1.0


async def test_a_log_start_that_stays_stalled_gives_up_once_after_its_budget(
    nats_server: NatsServer, make_stream
) -> None:
    """A SubjectLog's first append retries its Publisher's start at one level: against a
    server paused throughout it gives up after the log's retry budget with one note.
    Shown failing before: each attempt of the log's retry also retried the start's
    STREAM.INFO for the Publisher's own patience (2 s here), so it took up to twice the
    budget and the error carried two notes."""
    await make_stream("LOG", ("log.>",), duplicate_window=60)
    quick = ConnectOptions(servers=(nats_server.url,), request_timeout=0.5)
    async with await connect(quick) as conn:
        log = SubjectLog(conn, "LOG", "log.a", ack_timeout=1.0, max_attempts=2, retry_budget=2.0)
        loop = asyncio.get_running_loop()
        nats_server.pause()
        try:
            started = loop.time()
            with pytest.raises(OncestreamError) as caught:
                await log.append(b"x", msg_id="a")
            elapsed = loop.time() - started
        finally:
            nats_server.resume()
        notes = [n for n in getattr(caught.value, "__notes__", []) if "of retries" in n]
        assert len(notes) == 1 and "starting the publisher" in notes[0], notes
        # The budget, plus the one request that was running when it ran out.
        assert elapsed < 2.0 + 0.5 + 0.5, elapsed
        ack = await log.append(b"x", msg_id="a")  # the server back: the same log appends
        assert ack.seq == 1 and not ack.duplicate
        await log.close()


async def test_the_resume_scan_of_stored_ids_rides_out_a_pause(
    nats_server: NatsServer, conn: Connection, make_stream
) -> None:
    """The resume scan (which ids an earlier run stored) retries a paused server for the
    budget it is given; the load gives it its patience."""
    await make_stream("ORDERS", ("orders.>",), duplicate_window=60)
    await publish_n(conn, "orders.x", 20, msg_id=lambda i: f"o{i}")
    quick = ConnectOptions(servers=(nats_server.url,), request_timeout=1.0)
    async with await connect(quick) as slow:
        with _paused(nats_server):
            ids = await stored_ids(slow, "ORDERS", 0, retry_timeout=10.0)
    assert ids == {f"o{i}" for i in range(20)}
