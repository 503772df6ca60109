"""Structured Streaming reads: admission control, checkpointed offsets, restarts, data loss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from oncestream.streams import delete_stream
from tests.spark._helpers import publish, source_options

pytestmark = pytest.mark.timeout(240)


def _stream(spark: Any, url: str, stream: str, **extra: Any) -> Any:
    return (
        spark.readStream.format("jetstream").options(**source_options(url, stream, **extra)).load()
    )


def _run_available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    query = (
        df.select("stream", "sequence", "subject", "data")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert not query.isActive
    if query.exception() is not None:
        raise query.exception()
    return query


def _offset(progress: Any, key: str) -> Any:
    return json.loads(progress["sources"][0][key])


def _positions(progress: Any, key: str) -> Any:
    """The offset's positions, without the streams' creation times."""
    offset = _offset(progress, key)
    offset.pop("stream.created", None)
    return offset


def _sequences(spark: Any, out: Path) -> list[int]:
    return sorted(r.sequence for r in spark.read.parquet(str(out)).select("sequence").collect())


async def test_max_messages_per_trigger_sizes_batches(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("TRIG", ("trig.>",))
    await publish(conn, "trig.a", 50)
    df = _stream(
        spark, nats_server.url, "TRIG", startingOffsets="earliest", maxMessagesPerTrigger=20
    )
    query = _run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in progress] == [20, 20, 10]
    assert [_positions(p, "endOffset") for p in progress] == [
        {"TRIG": 20},
        {"TRIG": 40},
        {"TRIG": 50},
    ]
    # reportLatestOffset: progress shows the stream head next to the batch end.
    assert _offset(progress[0], "latestOffset") == {"TRIG": 50}
    assert _sequences(spark, tmp_path / "out") == list(range(1, 51))


async def test_batches_count_messages_under_filters_and_deletes(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("FLT", ("flt.>",))
    for i in range(40):
        await publish(conn, f"flt.{'a' if i % 2 == 0 else 'b'}", 1, start=i)
    await conn.api("STREAM.MSG.DELETE.FLT", {"seq": 5})  # one of the 20 flt.a messages
    df = _stream(
        spark,
        nats_server.url,
        "FLT",
        subjects="flt.a",
        startingOffsets="earliest",
        maxMessagesPerTrigger=5,
    )
    query = _run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert sizes == [5, 5, 5, 4]
    assert _sequences(spark, tmp_path / "out") == [s for s in range(1, 40, 2) if s != 5]


def test_stop_mid_stream_and_restart_is_exactly_once(
    spark_job: Any, nats_server: NatsServer, tmp_path: Path
) -> None:
    """Stopped after two micro-batches, restarted from the checkpoint: every message once.

    On a classic session and through Spark Connect (tests/spark/_jobs.py).
    """
    from harness import make_streams
    from oncestream.streams import StreamSpec
    from tests.spark._jobs import publish_messages

    make_streams(nats_server.url, StreamSpec(name="EO", subjects=("eo.>",)))
    publish_messages(nats_server.url, "eo.x", 60)
    result = spark_job(
        "source_stop_restart", url=nats_server.url, stream="EO", subject="eo.x", work=str(tmp_path)
    )
    assert 0 < len(result["first"]) < 60
    assert result["final"] == list(range(1, 76))


async def test_multi_stream_offsets_per_stream(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("MA", ("ma.>",))
    await make_stream("MB", ("mb.>",))
    await publish(conn, "ma.x", 30)
    await publish(conn, "mb.x", 10)
    df = _stream(
        spark,
        nats_server.url,
        "MA,MB",
        startingOffsets='{"MA": 11}',
        maxMessagesPerTrigger=20,
    )
    query = _run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = sorted((r.stream, r.sequence) for r in rows)
    assert got == [("MA", s) for s in range(11, 31)] + [("MB", s) for s in range(1, 11)]
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert all(size <= 20 for size in sizes) and sum(sizes) == 30
    assert _positions(query.lastProgress, "endOffset") == {"MA": 30, "MB": 10}


async def _gap(conn: Connection, make_stream: Any, name: str) -> None:
    await make_stream(name, (f"{name.lower()}.>",))
    await publish(conn, f"{name.lower()}.x", 30)


@pytest.mark.parametrize("fail", [True, False])
async def test_retention_gap(
    fail: bool,
    spark: Any,
    nats_server: NatsServer,
    conn: Connection,
    make_stream: Any,
    tmp_path: Path,
) -> None:
    name = "GAPT" if fail else "GAPF"
    await _gap(conn, make_stream, name)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    opts = {"startingOffsets": "earliest", "failOnDataLoss": str(fail).lower()}
    _run_available_now(_stream(spark, nats_server.url, name, **opts), out, checkpoint)
    assert _sequences(spark, out) == list(range(1, 31))
    # 31..50 arrive while the query is down; retention then removes 31..40 unread.
    await publish(conn, f"{name.lower()}.x", 20, start=30)
    await conn.api(f"STREAM.PURGE.{name}", {"seq": 41})
    df = _stream(spark, nats_server.url, name, **opts)
    if fail:
        with pytest.raises(Exception, match=r"(?s)sequences 31\.\.40.*failOnDataLoss"):
            _run_available_now(df, out, checkpoint)
        assert _sequences(spark, out) == list(range(1, 31))
    else:
        _run_available_now(df, out, checkpoint)
        assert _sequences(spark, out) == list(range(1, 31)) + list(range(41, 51))


def _payloads(spark: Any, out: Path) -> list[bytes]:
    return sorted(bytes(r.data) for r in spark.read.parquet(str(out)).select("data").collect())


def _expected(*ranges: range) -> list[bytes]:
    return sorted(b"m%d" % i for r in ranges for i in r)


async def test_starting_offsets_past_the_end_names_the_option(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    """Issue 38: a new query told to start past the stream's end is refused naming the
    option and the stream's end, not as a checkpoint (there is none) that 'has read up to
    sequence 99' of a stream 'deleted and recreated'."""
    await make_stream("SPE")
    await publish(conn, "spe.x", 3)
    df = _stream(spark, nats_server.url, "SPE", startingOffsets='{"SPE": 100}')
    with pytest.raises(
        Exception, match=r"'startingOffsets' starts stream 'SPE' at sequence 100"
    ) as raised:
        _run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    assert "the checkpoint has read up to" not in str(raised.value)


@pytest.mark.parametrize("fail", [True, False])
async def test_recreated_stream_grown_past_the_checkpoint(
    fail: bool,
    spark: Any,
    nats_server: NatsServer,
    conn: Connection,
    make_stream: Any,
    tmp_path: Path,
) -> None:
    """Issue 19: a stream deleted and re-created under its name, grown past the checkpoint.

    Its position (30) is inside the new stream (1..50), so only the creation time
    recorded in the offset shows that sequences 31..50 are not the old ones.
    """
    name = "RCT" if fail else "RCF"
    await make_stream(name)
    await publish(conn, f"{name.lower()}.x", 30)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    opts = {
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail).lower(),
        "maxMessagesPerTrigger": 20,
    }
    _run_available_now(_stream(spark, nats_server.url, name, **opts), out, checkpoint)
    assert _payloads(spark, out) == _expected(range(30))
    await delete_stream(conn, name)
    await make_stream(name)
    await publish(conn, f"{name.lower()}.x", 50, start=1000)
    df = _stream(spark, nats_server.url, name, **opts)
    if fail:
        pattern = (
            rf"(?s)stream '{name}' was deleted and re-created: the checkpoint's position 30"
            r".*failOnDataLoss=false"
        )
        with pytest.raises(Exception, match=pattern):
            _run_available_now(df, out, checkpoint)
        assert _payloads(spark, out) == _expected(range(30))
    else:
        _run_available_now(df, out, checkpoint)
        # The new stream from its beginning, every message exactly once.
        assert _payloads(spark, out) == _expected(range(30), range(1000, 1050))


async def test_checkpoint_without_creation_times_keeps_working(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    """Offsets written before the creation time was recorded are accepted and then upgraded."""
    await make_stream("OLDCK")
    await publish(conn, "oldck.x", 25)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    opts = {"startingOffsets": "earliest", "maxMessagesPerTrigger": 10}
    _run_available_now(_stream(spark, nats_server.url, "OLDCK", **opts), out, checkpoint)
    # Rewrite the offset log as an earlier oncestream wrote it: positions only.
    for path in (checkpoint / "offsets").iterdir():
        if path.name.startswith("."):
            path.unlink()  # Hadoop's checksum files would no longer match
            continue
        lines = path.read_text().splitlines()
        offset = json.loads(lines[-1])
        assert set(offset.pop("stream.created")) == {"OLDCK"}
        path.write_text("\n".join([*lines[:-1], json.dumps(offset)]) + "\n")
    await publish(conn, "oldck.x", 12, start=25)
    query = _run_available_now(_stream(spark, nats_server.url, "OLDCK", **opts), out, checkpoint)
    assert _payloads(spark, out) == _expected(range(37))
    assert "stream.created" in _offset(query.lastProgress, "endOffset")


@pytest.mark.parametrize("fail", [True, False])
async def test_batch_planned_before_the_stream_was_recreated(
    fail: bool, nats_server: NatsServer, conn: Connection, make_stream: Any
) -> None:
    """A batch in the offset log, replayed after a restart, whose stream was re-created since.

    The driver's ``partitions`` and the executor's read compare the creation time
    in the batch's end offset with the stream's: the old positions are never read
    in the new stream.
    """
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from oncestream._errors import DataLossError
    from oncestream.spark._source import SCHEMA, JetStreamStreamReader, _read

    name = "RPT" if fail else "RPF"
    await make_stream(name)
    await publish(conn, f"{name.lower()}.x", 10)
    options = source_options(
        nats_server.url, name, startingOffsets="earliest", failOnDataLoss=str(fail).lower()
    )
    reader = JetStreamStreamReader(options, SCHEMA)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    planned = reader.partitions(start, end)
    assert [(p.first, p.last) for p in planned] == [(1, 10)]  # type: ignore[attr-defined]
    await delete_stream(conn, name)
    await make_stream(name)
    await publish(conn, f"{name.lower()}.x", 20, start=100)
    if fail:
        with pytest.raises(DataLossError, match=f"stream '{name}' was deleted and re-created"):
            reader.partitions(start, end)
        with pytest.raises(DataLossError, match=f"stream '{name}' was deleted and re-created"):
            list(_read(reader.options, planned[0]))  # type: ignore[arg-type]
        return
    assert reader.partitions(start, end) == []
    assert list(_read(reader.options, planned[0])) == []  # type: ignore[arg-type]
    # The next batch restarts the stream (an empty batch), the one after reads it whole.
    reset = reader.latestOffset(end, ReadAllAvailable())
    assert reset[name] == 0 and reset["stream.created"] != end["stream.created"]
    assert reader.partitions(end, reset) == []
    after = reader.latestOffset(reset, ReadAllAvailable())
    assert [(p.first, p.last) for p in reader.partitions(reset, after)] == [(1, 20)]  # type: ignore[attr-defined]
