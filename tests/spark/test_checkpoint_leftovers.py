"""docs/spark-source.md, "A query that refuses to start after a kill in its first batch".

A driver killed while Spark wrote its first offset-log entry leaves Spark's hidden
temporary file (``offsets/.0.<uuid>.tmp`` and its ``.crc``); PySpark 4.1+ then refuse
every restart with ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` (the campaign of
2026-11-30, trial 77: docs/guarantees.md, finding 34). The test puts that leftover in
a new checkpoint, shows the refusal on the release it runs on (4.0 has no such
check), runs the function the document gives, as written there, and starts the query:
every message once.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from oncestream.spark._compat import SPARK_VERSION
from tests.spark._helpers import publish, source_options

pytestmark = pytest.mark.timeout(240)

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark-source.md"


def _documented_function() -> Any:
    text = DOC.read_text()
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", text, re.S)
        if "clear_first_batch_leftovers" in b
    ]
    scope: dict[str, Any] = {}
    exec(compile(block, str(DOC), "exec"), scope)
    return scope["clear_first_batch_leftovers"]


def _start(spark: Any, url: str, out: Path, checkpoint: Path) -> Any:
    return (
        spark.readStream.format("jetstream")
        .options(**source_options(url, "LEFT", startingOffsets="earliest"))
        .load()
        .select("sequence")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


async def test_a_first_batch_leftover_is_refused_then_cleared(
    spark: Any, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("LEFT", ("left.>",))
    await publish(conn, "left.a", 20)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True)
    leftover = offsets / f".0.{uuid.uuid4()}.tmp"
    leftover.write_text("v1\n")  # cut short, as by a SIGKILL before Spark's rename
    (offsets / f".{leftover.name}.crc").write_bytes(b"")
    query = _start(spark, nats_server.url, out, checkpoint)
    error: Exception | None = None
    try:
        query.awaitTermination(120)
    except Exception as exc:  # the query's failure, raised by awaitTermination
        error = exc
    finally:
        query.stop()
    if SPARK_VERSION >= (4, 1):
        assert error is not None and "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY" in str(error)
        removed = _documented_function()(str(checkpoint))
        assert sorted(Path(p).name for p in removed) == sorted(
            [leftover.name, f".{leftover.name}.crc"]
        )
        query = _start(spark, nats_server.url, out, checkpoint)
        try:
            query.awaitTermination(120)
            assert query.exception() is None
        finally:
            query.stop()
    else:
        assert error is None  # 4.0: no such check, the leftover is ignored
    rows = sorted(r.sequence for r in spark.read.parquet(str(out)).collect())
    assert rows == list(range(1, 21))
    # A planned batch now: the function leaves the checkpoint alone.
    assert _documented_function()(str(checkpoint)) == []
