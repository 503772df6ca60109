"""The Spark executor-side reader (PartitionReader) on a real server: both wire paths."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest

from oncestream._connection import Connection
from oncestream._errors import DataLossError
from oncestream._options import ConnectOptions
from oncestream.spark._reader import (
    ARROW_SCHEMA,
    PartitionReader,
    check_retention,
    close_connections,
    source_connection,
)
from tests.spark._helpers import publish


async def _read_all(conn: Connection, stream: str, first: int, last: int, **kw: Any) -> pa.Table:
    reader = PartitionReader(conn, stream, first, last, kw.pop("subjects", ()), **kw)
    batches = []
    try:
        while (batch := await reader.next_batch()) is not None:
            assert batch.schema.equals(ARROW_SCHEMA)
            batches.append(batch)
    finally:
        await reader.close()
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


@pytest.fixture
async def source_conn(options: ConnectOptions) -> AsyncIterator[Connection]:
    yield await source_connection(options)
    await close_connections()


@pytest.mark.parametrize("direct", [True, False])
async def test_exact_range_in_small_chunks(
    direct: bool, source_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RR", ("rr.>",))
    await publish(conn, "rr.a", 50, headers=True)
    table = await _read_all(source_conn, "RR", 7, 43, direct=direct, batch=8)
    assert table.column("sequence").to_pylist() == list(range(7, 44))
    assert table.column("data").to_pylist() == [b"m%d" % i for i in range(6, 43)]
    assert table.column("msg_id").to_pylist() == [f"id-{i}" for i in range(6, 43)]
    assert set(table.column("subject").to_pylist()) == {"rr.a"}
    assert set(table.column("stream").to_pylist()) == {"RR"}
    assert table.column("headers").null_count == len(table)
    stamps = table.column("timestamp").to_pylist()
    assert stamps == sorted(stamps) and stamps[0].year >= 2024


@pytest.mark.parametrize("direct", [True, False])
async def test_filters_deletes_and_headers(
    direct: bool, source_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RF", ("rf.>",))
    for i in range(30):
        await publish(conn, f"rf.{'even' if i % 2 == 0 else 'odd'}", 1, start=i, headers=True)
    await conn.api("STREAM.MSG.DELETE.RF", {"seq": 5})
    table = await _read_all(
        source_conn, "RF", 1, 20, subjects=("rf.even",), direct=direct, include_headers=True
    )
    assert table.column("sequence").to_pylist() == [1, 3, 7, 9, 11, 13, 15, 17, 19]
    # The msg id has its own column; the headers map holds the message's own headers.
    assert table.column("headers").to_pylist()[0] == [("X-Index", ["0"])]
    assert table.column("msg_id").to_pylist()[0] == "id-0"
    # Two filters go through a consumer with filter_subjects; nothing past the range end.
    both = await _read_all(
        source_conn, "RF", 2, 12, subjects=("rf.even", "rf.odd"), direct=direct, batch=4
    )
    assert both.column("sequence").to_pylist() == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12]


async def test_messages_without_headers_and_empty_ranges(
    source_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RN", ("rn.>",))
    await publish(conn, "rn.x", 5)
    for direct in (True, False):
        table = await _read_all(source_conn, "RN", 1, 100, direct=direct)
        assert table.column("sequence").to_pylist() == [1, 2, 3, 4, 5]
        assert table.column("msg_id").null_count == 5
        assert len(await _read_all(source_conn, "RN", 6, 10, direct=direct)) == 0
        assert len(await _read_all(source_conn, "RN", 3, 2, direct=direct)) == 0


async def test_connection_is_reused(source_conn: Connection, options: ConnectOptions) -> None:
    assert await source_connection(options) is source_conn


async def test_check_retention(conn: Connection, make_stream: Any) -> None:
    await make_stream("RT", ("rt.>",))
    await publish(conn, "rt.x", 10)
    await conn.api("STREAM.PURGE.RT", {"seq": 5})
    assert await check_retention(conn, "RT", 5, 10, fail_on_data_loss=True) == 5
    with pytest.raises(DataLossError, match=r"'RT': sequences 2\.\.4 .*failOnDataLoss=false"):
        await check_retention(conn, "RT", 2, 10, fail_on_data_loss=True)
    assert await check_retention(conn, "RT", 2, 10, fail_on_data_loss=False) == 5
    assert await check_retention(conn, "RT", 1, 3, fail_on_data_loss=False) == 4
    assert await check_retention(conn, "RT", 1, 0, fail_on_data_loss=True) == 1  # empty range


async def test_resolve_start_positions(conn: Connection, make_stream: Any) -> None:
    from datetime import datetime

    from oncestream.spark._planning import resolve_start, stream_infos
    from oncestream.spark._source_options import SourceOptions

    await make_stream("RS", ("rs.>",))
    await publish(conn, "rs.x", 5)
    times = {}
    for seq in range(1, 6):
        reply = await conn.api("STREAM.MSG.GET.RS", {"seq": seq})
        # RFC 3339 with up to 9 fraction digits (trailing zeros trimmed) -> microseconds.
        whole, _, fraction = reply["message"]["time"].rstrip("Z").partition(".")
        times[seq] = datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}+00:00")
    await conn.api("STREAM.PURGE.RS", {"seq": 2})
    url = conn.options.servers[0]

    async def start(streaming: bool, **options: str) -> dict[str, int]:
        opts = SourceOptions.from_spark_options({"servers": url, "stream": "RS", **options})
        return await resolve_start(conn, opts, await stream_infos(conn, opts), streaming=streaming)

    # Offsets are "last sequence read": earliest = first_seq - 1, latest = last_seq.
    assert await start(False) == {"RS": 1}
    assert await start(True) == {"RS": 5}
    assert await start(True, startingOffsets="earliest") == {"RS": 1}
    assert await start(True, startingOffsets='{"RS": 3}') == {"RS": 2}
    # startingTimestamp: the first message stored at or after it is read first.
    stamp = times[4]
    expected = min(seq for seq in range(2, 6) if times[seq] >= stamp) - 1
    assert await start(True, startingTimestamp=stamp.isoformat()) == {"RS": expected}
    millis = int(stamp.timestamp() * 1000) + 3_600_000
    assert await start(True, startingTimestamp=str(millis)) == {"RS": 5}


async def test_domain_prefix_is_used(server_factory: Any, tmp_path: Any) -> None:
    from oncestream._connection import connect
    from oncestream.spark._planning import plan_partitions, stream_infos
    from oncestream.spark._source_options import SourceOptions
    from oncestream.streams import StreamSpec, ensure_stream
    from tests import server_configs

    server = server_factory(server_configs.jetstream(tmp_path / "hub", domain="hub"), "hub")
    opts = SourceOptions.from_spark_options(
        {"servers": server.url, "stream": "DOM", "domain": "hub"}
    )
    async with await connect(opts.connect) as admin:
        assert admin.prefix == "$JS.hub.API"
        await ensure_stream(admin, StreamSpec(name="DOM", subjects=("dom.>",)))
        js = admin.nc.jetstream(domain="hub")
        for i in range(5):
            await js.publish("dom.x", b"%d" % i)
        reader_conn = await source_connection(opts.connect)
        try:
            infos = await stream_infos(reader_conn, opts)
            (part,) = await plan_partitions(reader_conn, opts, infos, {"DOM": 0}, {"DOM": 5})
            for direct in (True, False):
                table = await _read_all(reader_conn, "DOM", part.first, part.last, direct=direct)
                assert table.column("sequence").to_pylist() == [1, 2, 3, 4, 5]
        finally:
            await close_connections()


async def test_nth_sequence_counts_messages_not_sequences(
    source_conn: Connection, conn: Connection, make_stream: Any
) -> None:
    from oncestream.read._internal import nth_sequence

    await make_stream("NTH", ("nth.>",))
    for i in range(20):
        await publish(conn, f"nth.{'a' if i % 2 == 0 else 'b'}", 1, start=i)
    await conn.api("STREAM.MSG.DELETE.NTH", {"seq": 3})
    # nth.a holds 1, 3, 5, ...; 3 was deleted: the 3rd nth.a message after 0 is 7.
    assert await nth_sequence(source_conn, "NTH", 0, 3, ("nth.a",)) == (7, False)
    assert await nth_sequence(source_conn, "NTH", 0, 4, ()) == (5, False)
    assert await nth_sequence(source_conn, "NTH", 15, 10, ("nth.a",)) == (19, True)
    assert await nth_sequence(source_conn, "NTH", 19, 10, ("nth.a",)) == (None, True)
    info = await conn.stream_info("NTH")
    assert info["state"]["consumer_count"] == 0
