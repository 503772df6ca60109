"""A driver SIGKILLed around oncestream.spark.iceberg's commit, then restarted from its checkpoint.

Two kill points, one after the other in one chain of runs: in a micro-batch's
function before the Iceberg commit (nothing of the batch is in the table; the
restart runs it again) and right after it, before Spark's commit log (the batch is
in the table; the restart replays it and the writer must skip it). On a classic
session (the driver a subprocess whose whole session is killed) and under Spark
Connect (the function runs in the Connect server's Python worker: the server's
session is killed; tests/spark/_sink_drivers.py).
Afterwards the table holds every input row once, read back with pyiceberg and, where
Iceberg has a Spark runtime for this PySpark (tests/spark/_iceberg_spark.py), by
Spark through it; elsewhere the test checks the error that says there is none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyspark
import pytest

from harness import make_streams, publish_orders
from oncestream.server import NatsServer
from oncestream.spark import iceberg
from oncestream.spark._iceberg import committed_batch
from oncestream.streams import StreamSpec
from tests.spark._iceberg_spark import IcebergSparkUnsupported, iceberg_runtime
from tests.spark._sink_drivers import Drivers

# Three Spark drivers, the last resolving a runtime jar: past 300 s when make test
# runs both lanes on 2 cores.
pytestmark = pytest.mark.timeout(600)

JOB = str(Path(__file__).with_name("_iceberg_driver_job.py"))


def _batches(checkpoint: Path, log: str) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit())


def _sequences(warehouse: Path) -> list[int]:
    writer = iceberg("lake.orders", warehouse=str(warehouse), query_name="reader")
    table = writer._catalog().load_table(("lake", "orders"))  # type: ignore[attr-defined]
    return list(table.scan(selected_fields=("sequence",)).to_arrow().column(0).to_pylist())


def _committed(warehouse: Path, checkpoint: Path) -> int | None:
    query = json.loads((checkpoint / "metadata").read_text())["id"]
    writer = iceberg("lake.orders", warehouse=str(warehouse), query_name="reader")
    return committed_batch(writer._catalog().load_table(("lake", "orders")), query)  # type: ignore[attr-defined]


def assert_each_row_once(sequences: list[int], total: int) -> None:
    duplicated = sorted({s for s in sequences if sequences.count(s) > 1})
    missing = sorted(set(range(1, total + 1)) - set(sequences))
    assert (len(sequences), duplicated[:5], missing[:5]) == (total, [], [])


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_driver_killed_around_the_iceberg_commit(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
) -> None:
    """Both kill points in one chain of runs (each driver start is 10-20 s of CI time).

    Run 1: batches 0-2, then killed in batch 3 before its Iceberg commit. Run 2:
    batch 3 again, 4, then killed in batch 5 after its Iceberg commit. Run 3: batch 5
    replayed (skipped) to the end.
    """
    url = nats_server.url
    warehouse, checkpoint = tmp_path / "lake", tmp_path / "chk"
    make_streams(url, StreamSpec(name="IN", subjects=("in.>",)))
    publish_orders(url, "IN", "in.orders", 2000)
    args = [JOB, url, str(warehouse), str(checkpoint)]
    assert drivers.run_job([*args, "before:3"], kills=True) == -9
    assert (tmp_path / "killed-before-3").exists()
    assert _batches(checkpoint, "offsets") == [0, 1, 2, 3]
    assert _batches(checkpoint, "commits") == [0, 1, 2]  # Spark never committed batch 3
    # Batch 3 never reached the table.
    assert (sorted(_sequences(warehouse)), _committed(warehouse, checkpoint)) == (
        list(range(1, 1501)), 2,
    )  # fmt: skip
    publish_orders(url, "IN", "in.orders", 1000, start=2000)
    assert drivers.run_job([*args, "after:5"], kills=True) == -9
    assert (tmp_path / "killed-after-5").exists()
    assert _batches(checkpoint, "commits") == [0, 1, 2, 3, 4]  # not batch 5
    # Batch 5 is in the table, its mark too.
    assert (sorted(_sequences(warehouse)), _committed(warehouse, checkpoint)) == (
        list(range(1, 3001)), 5,
    )  # fmt: skip
    spark_reads = mode == "classic" and _iceberg_runtime_here()
    assert drivers.run_job([*args, "none+read" if spark_reads else "none"], kills=False) == 0
    assert _batches(checkpoint, "commits") == [0, 1, 2, 3, 4, 5]
    assert_each_row_once(_sequences(warehouse), 3000)
    if spark_reads:  # the last run's session read the table through Iceberg's runtime
        assert (tmp_path / "spark-rows").read_text() == "ROWS 3000 3000\n"


def _iceberg_runtime_here() -> bool:
    """Whether Iceberg has a Spark runtime for this PySpark; where not, the error says so."""
    try:
        iceberg_runtime()
    except IcebergSparkUnsupported as exc:  # this PySpark: the error a user gets, then done
        assert pyspark.__version__ in str(exc) and "pyiceberg" in str(exc)
        return False
    return True
