"""The nats-py adapter: probe, path choice, and the public-API path against a real server.

``make test`` runs the publish, process and Spark-read tests a second time
with ``ONCESTREAM_NATS_FASTPATH=0``; these tests also drive the public-API
path directly in the main run.
"""

from __future__ import annotations

from typing import Any

import nats.aio.client
import pytest

import oncestream._nats as adapter
from oncestream import Connection, ConnectOptions, connect
from oncestream._nats._public import header_block, split_frames
from oncestream.audit._audit import read_stream
from oncestream.publish import Publisher, PublisherOptions
from oncestream.read import PullOptions, pull_messages


def test_the_path_follows_the_environment(conn: Connection) -> None:
    forced = not adapter.fastpath_wanted()
    assert conn.fast_path[0] is not forced
    if forced:
        assert adapter.FASTPATH_ENV in conn.fast_path[1]
    else:
        assert conn.fast_path[1] == "internals probed"


def test_frames_split_back_into_publish_arguments() -> None:
    frames = (
        b"HPUB a.b _INBOX.x.1 28 30\r\nNATS/1.0\r\nNats-Msg-Id: 1\r\n\r\nhi\r\n"
        b"PUB $JS.ACK.S.C.1.2.3.4.5 4\r\n+ACK\r\n"
        b"HPUB c 20 20\r\nNATS/1.0\r\nK: v w\r\n\r\n\r\n"
        b"PUB d r 0\r\n\r\n"
    )
    assert list(split_frames(frames)) == [
        ("a.b", "_INBOX.x.1", b"hi", {"Nats-Msg-Id": "1"}),
        ("$JS.ACK.S.C.1.2.3.4.5", "", b"+ACK", None),
        ("c", "", b"", {"K": "v w"}),
        ("d", "r", b"", None),
    ]
    with pytest.raises(ValueError):
        list(split_frames(b"HPUB a 2 5\r\nxyz\r\n"))


def test_header_dicts_render_as_blocks() -> None:
    assert header_block(None) is None
    assert header_block({"Status": "404", "Description": "No Messages"}) == (
        b"NATS/1.0 404 No Messages\r\n\r\n"
    )
    assert header_block({"Status": "503"}) == b"NATS/1.0 503\r\n\r\n"
    assert header_block({"Nats-Msg-Id": "a", "X": "1"}) == (
        b"NATS/1.0\r\nNats-Msg-Id: a\r\nX: 1\r\n\r\n"
    )


async def test_a_failed_probe_falls_back(
    options: ConnectOptions, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(adapter.FASTPATH_ENV, "1")
    monkeypatch.setattr(adapter, "_library", None)
    monkeypatch.setattr(adapter, "_logged", set())

    def _send_command(self: Any, cmd: bytes, priority: bool = False) -> None:
        """A nats-py whose internals changed shape."""

    monkeypatch.setattr(nats.aio.client.Client, "_send_command", _send_command)
    with caplog.at_level("INFO", logger="oncestream._nats"):
        async with await connect(options) as conn:
            assert not conn.fast_path[0]
            assert "_send_command" in conn.fast_path[1]
            await conn.flush()
    assert "public-API path" in caplog.text


async def test_public_path_publishes_reads_and_acks(
    options: ConnectOptions, make_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(adapter.FASTPATH_ENV, "0")
    # The ack path (each PubAck's sequence) on the public API; fast-ingest has its own tests.
    await make_stream("PUBLIC", ("public.>",), allow_batched=False)
    async with await connect(options) as conn:
        assert not conn.fast_path[0]
        async with Publisher(conn, PublisherOptions(stream="PUBLIC")) as pub:
            futures = [
                await pub.publish("public.a", b"m%d" % i, msg_id=f"id-{i}", headers={"X": str(i)})
                for i in range(300)
            ]
            await pub.flush()
        assert [f.result().seq for f in futures] == list(range(1, 301))
        records = [r async for chunk in read_stream(conn, "PUBLIC", batch=64) for r in chunk]
        assert [r.msg_id for r in records] == [f"id-{i}" for i in range(300)]
        await conn.api(
            "CONSUMER.CREATE.PUBLIC.w",
            {"stream_name": "PUBLIC", "config": {"durable_name": "w", "ack_policy": "explicit"}},
        )
        got = []
        async with pull_messages(conn, "PUBLIC", "w", PullOptions(batch=100)) as messages:
            while len(got) < 300:
                batch = await messages.next_batch(timeout=10)
                assert batch
                got.extend(batch)
                await conn.publish_many([m.reply for m in batch], b"+ACK")
        # A flush is a round trip: the server has read every ack sent before it.
        await conn.flush()
        info = await conn.api("CONSUMER.INFO.PUBLIC.w")
        assert info["ack_floor"]["stream_seq"] == 300
