"""Batch reads with ``spark.read.format("jetstream")`` and option validation."""

from __future__ import annotations

from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from tests.spark._helpers import publish, source_options

pytestmark = pytest.mark.timeout(180)


def _read(spark: Any, url: str, stream: str, **extra: Any) -> Any:
    return spark.read.format("jetstream").options(**source_options(url, stream, **extra)).load()


async def test_subject_filter_and_headers(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    await make_stream("HDR", ("hdr.>",))
    await publish(conn, "hdr.a", 20, headers=True)
    await publish(conn, "hdr.b", 20, start=20, headers=True)
    df = _read(
        spark,
        nats_server.url,
        "HDR",
        subjects="hdr.b",
        includeHeaders="true",
        minPartitions=3,
        readMethod="direct",
    )
    assert df.schema.simpleString() == (
        "struct<stream:string,subject:string,sequence:bigint,timestamp:timestamp,"
        "msg_id:string,headers:map<string,array<string>>,data:binary>"
    )
    rows = sorted(df.collect(), key=lambda r: r.sequence)
    assert [r.sequence for r in rows] == list(range(21, 41))
    assert {r.subject for r in rows} == {"hdr.b"}
    first = rows[0]
    assert first.stream == "HDR"
    assert first.msg_id == "id-20"
    assert first.data == b"m20"
    assert first.headers == {"X-Index": ["20"]}  # the id is in msg_id, not repeated here
    assert first.timestamp is not None
    # Without includeHeaders the map stays empty but msg_id is still filled.
    plain = _read(spark, nats_server.url, "HDR", subjects="hdr.a").orderBy("sequence").first()
    assert plain.headers is None and plain.msg_id == "id-0"


async def test_offsets_range_and_interior_deletes(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    await make_stream("RNG", ("rng.>",), allow_direct=False)
    await publish(conn, "rng.x", 30)
    await conn.api("STREAM.MSG.DELETE.RNG", {"seq": 15})
    df = _read(
        spark,
        nats_server.url,
        "RNG",
        startingOffsets='{"RNG": 10}',
        endingOffsets='{"RNG": 20}',
    )
    # startingOffsets is inclusive, endingOffsets exclusive (Kafka); 15 was deleted.
    assert sorted(r.sequence for r in df.collect()) == [10, 11, 12, 13, 14, 16, 17, 18, 19]


async def test_multi_stream_batch(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    await make_stream("BA", ("ba.>",))
    await make_stream("BB", ("bb.>",), allow_direct=False)
    await publish(conn, "ba.x", 12)
    await publish(conn, "ba.y", 3, start=12)
    await publish(conn, "bb.x", 7)
    # One subjects option for both streams: each stream gets the filters that can match it.
    df = _read(spark, nats_server.url, "BA,BB", subjects="ba.x,bb.>")
    got = sorted((r.stream, r.sequence, r.data) for r in df.collect())
    expected = [("BA", i + 1, b"m%d" % i) for i in range(12)]
    expected += [("BB", i + 1, b"m%d" % i) for i in range(7)]
    assert got == sorted(expected)


async def test_batch_retention_gap(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    await make_stream("BGAP", ("bgap.>",))
    await publish(conn, "bgap.x", 20)
    await conn.api("STREAM.PURGE.BGAP", {"seq": 6})
    opts = {"startingOffsets": '{"BGAP": 1}'}
    with pytest.raises(Exception, match=r"(?s)'BGAP'.*sequences 1\.\.5.*failOnDataLoss"):
        _read(spark, nats_server.url, "BGAP", **opts).collect()
    rows = _read(spark, nats_server.url, "BGAP", failOnDataLoss="false", **opts).collect()
    assert sorted(r.sequence for r in rows) == list(range(6, 21))
    # An empty plan (latest) over a purged stream is not data loss.
    assert _read(spark, nats_server.url, "BGAP", startingOffsets="latest").count() == 0


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        ({"stream": "NOPE"}, r"stream 'NOPE' does not exist"),
        ({"startingOffsets": "{not json"}, r"startingOffsets.*'\{not json'"),
        ({"startingOffsets": '{"OTHER": 3}'}, r"startingOffsets.*'OTHER'.*not in option"),
        ({"maxMessagesPerTrigger": "-5"}, r"maxMessagesPerTrigger.*> 0.*'-5'"),
        ({"minPartitions": "0"}, r"minPartitions.*> 0"),
        ({"failOnDataLoss": "maybe"}, r"failOnDataLoss.*'maybe'"),
        ({"startingOffsets": "earliest", "bogusOption": "1"}, r"unknown option.*bogusoption"),
        # issue 38: Kafka refuses a minimum above the maximum; a time past year 9999 and a
        # start past the stream's end are named, not a traceback or an empty read.
        (
            {"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            r"'minOffsetsPerTrigger' \(10\) is higher than 'maxOffsetsPerTrigger'",
        ),
        ({"endingTimestamp": "99999999999999999999"}, r"endingTimestamp.*0 to 253402300799999"),
        (
            {"startingOffsets": '{"OPT": 5}'},
            r"'startingOffsets' starts stream 'OPT' at sequence 5, past its end.*up to 1",
        ),
    ],
)
async def test_bad_options_fail_clearly(
    extra: dict[str, str],
    pattern: str,
    spark: Any,
    nats_server: NatsServer,
    make_stream: Any,
) -> None:
    await make_stream("OPT", ("opt.>",))
    options = source_options(nats_server.url, "OPT")
    options.update(extra)
    with pytest.raises(Exception, match=pattern):
        spark.read.format("jetstream").options(**options).load().collect()
