"""Streams oncestream creates allow fast-ingest batches where the server takes them (issue 40).

``StreamSpec(allow_batched=None)``, the default, turns them on when ``ensure_stream``,
``create_stream_if_missing`` or ``oncestream stream add`` creates a stream on nats-server
2.14+ (the test server is newer), so a ``Publisher`` with the default ``ingest="auto"``
sends fast batches; an existing stream keeps its setting unless the spec says otherwise,
a mirror never gets it, and ``--no-allow-batched`` / ``allow_batched=False`` turn it off.
"""

from __future__ import annotations

from typing import Any

from oncestream import ConnectOptions, Publisher, PublisherOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSource, StreamSpec, create_stream_if_missing, ensure_stream
from oncestream.streams._internal import server_version
from tests.integration._cli import cli_json


async def _config(url: str, name: str) -> dict[str, Any]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return dict((await conn.stream_info(name))["config"])


async def test_created_streams_allow_fast_ingest_and_publishers_use_it(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        version = server_version(conn)
        assert version is not None and version[:2] >= (2, 14)  # the premise of the defaults
        made = await ensure_stream(conn, StreamSpec(name="FBD_E", subjects=("fbde.>",)))
        assert made["config"].get("allow_batched") is True
        missing = await create_stream_if_missing(
            conn, StreamSpec(name="FBD_C", subjects=("fbdc.>",))
        )
        assert missing["config"].get("allow_batched") is True
        mirror = await ensure_stream(
            conn, StreamSpec(name="FBD_M", mirror=StreamSource(name="FBD_E"))
        )
        assert not mirror["config"].get("allow_batched")  # a mirror takes no publishes
        off = await ensure_stream(
            conn, StreamSpec(name="FBD_OFF", subjects=("fbdoff.>",), allow_batched=False)
        )
        assert not off["config"].get("allow_batched")
        async with Publisher(conn, PublisherOptions(stream="FBD_E")) as pub:
            assert pub.ingest == "fast"  # the default ingest='auto' takes the fast path
            futures = [await pub.publish("fbde.x", b"%d" % i, msg_id=f"m{i}") for i in range(3)]
            acks = [await future for future in futures]
        assert all(ack.stream == "FBD_E" and ack.batch for ack in acks)  # a flow ack's range
        assert (await conn.stream_info("FBD_E"))["state"]["messages"] == 3


async def test_an_existing_stream_keeps_its_setting_unless_the_spec_says(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        spec = StreamSpec(name="FBD_OLD", subjects=("fbdold.>",), allow_batched=False)
        await ensure_stream(conn, spec)
        # An update with the default (None) spec, e.g. a changed limit: the setting stays.
        kept = await ensure_stream(
            conn, StreamSpec(name="FBD_OLD", subjects=("fbdold.>",), max_msgs=100)
        )
        assert not kept["config"].get("allow_batched") and kept["config"]["max_msgs"] == 100
        on = await ensure_stream(
            conn, StreamSpec(name="FBD_OLD", subjects=("fbdold.>",), allow_batched=True)
        )
        assert on["config"]["allow_batched"] is True
        again = await ensure_stream(conn, StreamSpec(name="FBD_OLD", subjects=("fbdold.>",)))
        assert again["config"]["allow_batched"] is True  # and stays on


def test_stream_add_allows_fast_ingest_unless_told_not_to(nats_server: NatsServer) -> None:
    url = nats_server.url
    added = cli_json(url, "stream", "add", "FBD_CLI", "--subjects", "fbdcli.>")
    assert added["config"]["allow_batched"] is True
    # The same add again is a no-op, not a conflict with the stream it created.
    assert cli_json(url, "stream", "add", "FBD_CLI", "--subjects", "fbdcli.>")["config"][
        "allow_batched"
    ]
    off = cli_json(url, "stream", "add", "FBD_NO", "--subjects", "fbdno.>", "--no-allow-batched")
    assert not off["config"].get("allow_batched")
    # An existing stream without it: a plain add names no difference and changes nothing.
    same = cli_json(url, "stream", "add", "FBD_NO", "--subjects", "fbdno.>")
    assert not same["config"].get("allow_batched")
