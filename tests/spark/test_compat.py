"""What differs between PySpark releases (spark/_compat.py), one test per branch.

``make test`` runs this file on the newest PySpark (admission control: Spark hands
the reader the start and a read limit) and on the oldest supported one (4.0: the
reader keeps the start itself, and AvailableNow cannot honour a read limit).
Each test asserts the behaviour of the release it runs on; none is skipped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
import pytest

from oncestream import ConfigError
from oncestream._connection import Connection
from oncestream.server import NatsServer
from oncestream.spark._compat import (
    ADMISSION_CONTROL,
    SPARK_VERSION,
    StreamArrowWriter,
    refuse_read_limits,
    spark_version,
)
from tests.spark._helpers import publish, source_options

pytestmark = pytest.mark.timeout(240)


def _stream(spark: Any, url: str, stream: str, **extra: Any) -> Any:
    return (
        spark.readStream.format("jetstream").options(**source_options(url, stream, **extra)).load()
    )


def _start(df: Any, out: Path, checkpoint: Path, **trigger: Any) -> Any:
    return (
        df.select("stream", "sequence")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def _batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def _sequences(spark: Any, out: Path) -> list[int]:
    return sorted(r.sequence for r in spark.read.parquet(str(out)).select("sequence").collect())


def test_version_flags_match_the_installed_pyspark() -> None:
    assert spark_version(pyspark.__version__) == SPARK_VERSION
    assert ADMISSION_CONTROL is (SPARK_VERSION >= (4, 2))
    assert spark_version("4.0.0") == (4, 0) and spark_version("4.2.0.dev1") == (4, 2)
    with pytest.raises(ConfigError, match="cannot read the PySpark version"):
        spark_version("four")
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

    # 4.0 feeds Arrow batches to a stream writer that is a DataSourceArrowWriter; 4.1+ has a class.
    if SPARK_VERSION >= (4, 1):
        from pyspark.sql.datasource import DataSourceStreamArrowWriter

        assert StreamArrowWriter is DataSourceStreamArrowWriter
    else:
        assert issubclass(StreamArrowWriter, DataSourceStreamWriter)
        assert issubclass(StreamArrowWriter, DataSourceArrowWriter)


def test_read_limits_need_admission_control() -> None:
    refuse_read_limits([])  # nothing set: fine everywhere
    if ADMISSION_CONTROL:
        refuse_read_limits(["maxMessagesPerTrigger", "minOffsetsPerTrigger"])
    else:
        with pytest.raises(ConfigError, match=r"maxMessagesPerTrigger.*PySpark 4\.2 or newer"):
            refuse_read_limits(["maxMessagesPerTrigger"])


async def test_processing_time_batches_across_a_restart(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    """4.2+: batches of maxMessagesPerTrigger. 4.0/4.1: all that is available per batch.

    After the restart the reader must start where the checkpoint ends: on PySpark
    < 4.2 only because Spark tells it the checkpoint's latest offset
    (``partitions(x, x)``) before asking for the next end, which the reader keeps.
    """
    await make_stream("PT", ("pt.>",))
    await publish(conn, "pt.a", 50)
    limit = {"maxMessagesPerTrigger": 20} if ADMISSION_CONTROL else {}
    df = _stream(spark, nats_server.url, "PT", startingOffsets="earliest", **limit)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    for new_rows, batches in ((50, [20, 20, 10]), (30, [20, 10])):
        query = _start(df, out, checkpoint, processingTime="100 milliseconds")
        try:
            query.processAllAvailable()
            assert _batch_sizes(query) == (batches if ADMISSION_CONTROL else [new_rows])
        finally:
            query.stop()
        if new_rows == 50:
            await publish(conn, "pt.a", 30, start=50)
    assert _sequences(spark, out) == list(range(1, 81))


async def test_a_read_limit_per_release(
    spark_job: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    """4.2+: AvailableNow in batches of the limit. 4.0/4.1: refused where the read is defined.

    Classic Spark asks the source for its schema at ``load()``, Connect when the
    command that first analyses the read runs (``start()``): the refusal comes from
    that call, before any query starts, naming the option and the release. Before,
    it came from the query's thread once the query planned, inside its failure.
    """
    await make_stream("AN", ("an.>",))
    await publish(conn, "an.a", 50)
    found = await asyncio.to_thread(
        spark_job, "read_limit_stage", url=nats_server.url, stream="AN", work=str(tmp_path)
    )
    if ADMISSION_CONTROL:
        assert found == {"stage": "run", "error": None, "batches": [20, 20, 10]}
        assert pq.read_table(tmp_path / "out").num_rows == 50
        return
    early = ("load",) if spark_job.mode == "classic" else ("load", "start")
    assert found["stage"] in early, found
    error = found["error"]
    assert "ConfigError: option maxMessagesPerTrigger (or maxOffsetsPerTrigger) needs " in error
    assert f"this is PySpark {pyspark.__version__}, where Spark asks" in error
    assert not (tmp_path / "out").exists()  # nothing was read


async def test_available_now_without_a_limit_reads_everything(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("ALL", ("all.>",))
    await publish(conn, "all.a", 50)
    df = _stream(spark, nats_server.url, "ALL", startingOffsets="earliest")
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    for new_rows in (50, 30):
        query = _start(df, out, checkpoint, availableNow=True)
        query.awaitTermination(180)
        assert query.exception() is None
        assert sum(_batch_sizes(query)) == new_rows
        if new_rows == 50:
            await publish(conn, "all.a", 30, start=50)
    assert _sequences(spark, out) == list(range(1, 81))
