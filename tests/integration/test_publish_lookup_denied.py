"""A "no responders" answer is still told apart when the user may not list streams.

nats-server answers 503 both for a subject no stream captures and for a stream
without a leader; the Publisher asks ``STREAM.NAMES`` which it is. A user denied
that request got ``PublishFailed`` ("no leader of stream 'PUBT' answered"), and
``oncestream publish`` exit 1 ("re-run"), forever, for a subject the target stream
does not capture. Now the target's ``STREAM.INFO`` decides; only when nothing can
be read is the failure an outage that names the permission to grant. And a target
stream deleted while ``oncestream publish`` runs is named as gone, not the subject.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import nats.aio.msg
import orjson
import pytest
from typer.testing import CliRunner

from oncestream import (
    Connection,
    ConnectOptions,
    Publisher,
    PublisherOptions,
    PublishFailed,
    StreamNotFound,
    connect,
)
from oncestream.cli import app
from oncestream.cli._app import exit_code_for
from oncestream.publish import AtomicPublisher, ProducerSession
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs


@pytest.fixture
def server(server_factory: Callable[..., NatsServer], tmp_path: Path) -> NatsServer:
    return server_factory(server_configs.stream_lookup_denied(tmp_path / "denied"))


def _as(server: NatsServer, user: str) -> ConnectOptions:
    return ConnectOptions(servers=(server.url,), user=user, password=f"{user}-pw")


async def _streams(server: NatsServer, *specs: StreamSpec) -> None:
    async with await connect(_as(server, "app")) as admin:
        for spec in specs:
            await ensure_stream(admin, spec)


async def _holds(server: NatsServer, stream: str, count: int) -> None:
    async with await connect(_as(server, "app")) as admin:
        assert (await admin.stream_info(stream))["state"]["messages"] == count


async def test_a_subject_the_target_does_not_capture_is_stream_not_found_without_stream_names(
    server: NatsServer,
) -> None:
    await _streams(server, StreamSpec(name="PUBT", subjects=("pubt.>",)))
    options = PublisherOptions(stream="PUBT", ack_timeout=0.3, max_attempts=3)
    async with await connect(_as(server, "nonames")) as conn, Publisher(conn, options) as pub:
        with pytest.raises(StreamNotFound) as caught:
            await asyncio.wait_for(await pub.publish("nowhere.x", b"x", msg_id="n1"), 10)
        ack = await asyncio.wait_for(await pub.publish("pubt.x", b"x", msg_id="p1"), 10)
    said = str(caught.value)
    assert "'nowhere.x'" in said and "'PUBT'" in said and "'pubt.>'" in said, said
    assert caught.value.code == 503 and exit_code_for(caught.value) == 2
    assert ack.stream == "PUBT" and not ack.duplicate
    await _holds(server, "PUBT", 1)


async def test_a_partitioned_target_is_read_by_its_published_subjects(
    server: NatsServer,
) -> None:
    """A partitioned stream stores ``<partition>.<subject>``: it captures what is published."""
    await _streams(
        server, StreamSpec(name="PART", subjects=("part.*",), partitions=4, partition_key=(1,))
    )
    options = PublisherOptions(stream="PART", ack_timeout=0.3, max_attempts=3)
    async with await connect(_as(server, "nonames")) as conn, Publisher(conn, options) as pub:
        ack = await asyncio.wait_for(await pub.publish("part.k1", b"x", msg_id="k1"), 10)
        with pytest.raises(StreamNotFound, match=r"'0\.part\.k1'.*'PART'"):
            await asyncio.wait_for(await pub.publish("0.part.k1", b"x", msg_id="s1"), 10)
    assert ack.stream == "PART"
    await _holds(server, "PART", 1)


async def test_with_no_stream_to_read_the_failure_names_the_permission(
    server: NatsServer,
) -> None:
    """Nothing to read (no target stream, STREAM.NAMES denied): an outage that cannot be
    told from a missing stream, so PublishFailed (exit 1) saying what to grant."""
    options = PublisherOptions(ack_timeout=0.3, max_attempts=2, check_window=False)
    async with await connect(_as(server, "nonames")) as conn, Publisher(conn, options) as pub:
        with pytest.raises(PublishFailed) as caught:
            await asyncio.wait_for(await pub.publish("nowhere.x", b"x", msg_id="n1"), 10)
    said = str(caught.value)
    assert "could not tell" in said and "'$JS.API.STREAM.NAMES'" in said, said
    assert "PermissionDenied" in said and exit_code_for(caught.value) == 1


async def test_atomic_batches_decide_a_503_the_same_way_without_stream_names(
    server: NatsServer,
) -> None:
    """The AtomicPublisher (the Spark sink's ingest=atomic) and a batching ProducerSession."""
    await _streams(server, StreamSpec(name="ATB", subjects=("atb.>",), allow_atomic=True))
    options = PublisherOptions(stream="ATB", ack_timeout=0.3, max_attempts=3)
    async with await connect(_as(server, "nonames")) as conn:
        atomic = AtomicPublisher(conn, options, chunk_size=10)
        try:
            await atomic.publish(["nowhere.a"] * 2, [b"x"] * 2, ["n1", "n2"])
            with pytest.raises(StreamNotFound, match=r"'nowhere\.a'.*'ATB' captures 'atb\.>'"):
                await asyncio.wait_for(atomic.flush(), timeout=10)
        finally:
            await atomic.close()
        assert atomic.stats.resent == 0  # decided at the first 503, not after 3 attempts
        session = ProducerSession(
            conn, stream="ATB", subject_prefix="nowhere", producer_id="p1", options=options,
            batch_size=2,
        )  # fmt: skip
        await session.start()
        try:
            await session.publish(1, b"x")
            with pytest.raises(StreamNotFound, match=r"'nowhere\.p1'.*'ATB' captures"):
                await asyncio.wait_for(session.publish(2, b"x"), timeout=10)
        finally:
            await session.close()


def _jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(orjson.dumps(r).decode() + "\n" for r in records))
    return path


async def test_cli_publish_without_stream_names_exits_2_for_a_subject_not_captured(
    server: NatsServer, tmp_path: Path
) -> None:
    await _streams(server, StreamSpec(name="NPT", subjects=("npt.eu",)))
    path = _jsonl(tmp_path / "in.jsonl", [{"id": "a", "r": "eu"}, {"id": "b", "r": "us"}])
    login = ["-s", server.url, "--user", "nonames", "--password", "nonames-pw", "--no-progress",
             "--id-field", "id", "--ack-timeout", "300ms", "--max-attempts", "3"]  # fmt: skip
    invoke = CliRunner().invoke
    record = await asyncio.to_thread(invoke, app, ["publish", str(path), "--stream", "NPT",
                                                   "--subject", "npt.{r}", *login])  # fmt: skip
    # Another file: the first one's progress records would refuse another --subject.
    other = _jsonl(tmp_path / "literal.jsonl", [{"id": "c"}])
    literal = await asyncio.to_thread(invoke, app, ["publish", str(other), "--stream", "NPT",
                                                    "--subject", "nowhere.x", *login])  # fmt: skip
    said = " ".join(record.output.split())
    assert record.exit_code == 2, record.output
    assert "subject 'npt.us' of a record is not captured by --stream 'NPT'" in said, said
    assert "(which captures 'npt.eu')" in said and "resume: re-run" not in said, said
    said = " ".join(literal.output.split())
    assert literal.exit_code == 2, literal.output
    # Refused up front, from the target's subjects: before anything is sent.
    assert "--subject 'nowhere.x' is not captured by --stream 'NPT'" in said, said
    assert "nothing was published" in said, said
    await _holds(server, "NPT", 1)


async def test_cli_publish_names_a_target_stream_deleted_while_it_runs(
    conn: Connection, make_stream, options: ConnectOptions, tmp_path: Path
) -> None:
    """Exit 2 saying the stream is gone and the way back (create it, --fresh), not "fix
    --subject" after "resume: re-run the same command"; that way back stores every record."""
    await make_stream("GONE", ("gone.>",))
    total = 400
    path = _jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}"} for i in range(total)])
    args = ["publish", str(path), "--stream", "GONE", "--subject", "gone.x", "--id-field", "id",
            "-s", options.servers[0], "--no-progress", "--rate", "40"]  # fmt: skip
    seen = asyncio.Event()
    count = 0

    async def on_record(_msg: nats.aio.msg.Msg) -> None:
        nonlocal count
        count += 1
        if count >= 10:
            seen.set()

    watch = await conn.nc.subscribe("gone.x", cb=on_record)
    run = asyncio.ensure_future(asyncio.to_thread(CliRunner().invoke, app, args))
    await asyncio.wait_for(seen.wait(), timeout=20)  # the run is publishing
    await watch.unsubscribe()  # an interest in the subject would answer instead of a 503
    await conn.flush()
    assert not run.done()  # 400 records at 40/s: it publishes for 10 s
    await conn.api("STREAM.DELETE.GONE")
    result = await asyncio.wait_for(run, timeout=60)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "stream 'GONE' (--stream) no longer exists" in said, said
    assert "--fresh" in said and "resume: re-run" not in said, said
    assert "--subject" not in said and "captured by" not in said, said
    await make_stream("GONE", ("gone.>",))
    again = await asyncio.to_thread(CliRunner().invoke, app, [*args[:-2], "--fresh"])
    assert again.exit_code == 0, again.output
    assert (await conn.stream_info("GONE"))["state"]["messages"] == total
