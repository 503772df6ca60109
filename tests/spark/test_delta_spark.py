"""Delta Lake's own Spark sink behind the jetstream source: the same guarantee, where it runs.

delta-spark keeps each streaming query's last batch id in the table as an
application transaction (app id: the query id) and skips a batch it already
committed. Here the driver is SIGKILLed between Delta's commit and Spark's commit
log, restarted, and the table (read back with deltalake) holds every input once.
delta-spark has releases for some Spark minors only (tests/spark/_delta_spark.py):
on one it lacks, the test checks the error that says so.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pyspark
import pytest
from deltalake import DeltaTable, write_deltalake

from harness import make_streams, publish_orders
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.spark._delta_spark import DeltaSparkUnsupported, delta_spark_version
from tests.spark.test_delta import assert_each_row_once, batch_files, run_job

# Three Spark drivers, each resolving a runtime jar: past 300 s when make test
# runs both lanes on 2 cores.
pytestmark = pytest.mark.timeout(600)


def test_delta_sink_killed_between_its_commit_and_sparks(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    try:
        delta_spark_version()
    except DeltaSparkUnsupported as exc:  # this PySpark: the error a user gets, then done
        assert pyspark.__version__ in str(exc) and "oncestream.spark.delta" in str(exc)
        return
    url = nats_server.url
    table, checkpoint = tmp_path / "table", tmp_path / "chk"
    make_streams(url, StreamSpec(name="IN", subjects=("in.>",)))
    publish_orders(url, "IN", "in.orders", 1000)
    assert run_job(url, table, checkpoint, "spark", "none") == 0
    assert batch_files(checkpoint, "commits") == [0]
    publish_orders(url, "IN", "in.orders", 1000, start=1000)
    # Planning batch 1 swaps the commit log's folder for a file: Spark's commit fails
    # right after Delta's, and the job SIGKILLs itself there. Then the folder is put back.
    assert run_job(url, table, checkpoint, "spark", "first") == -signal.SIGKILL
    (checkpoint / "commits").unlink()
    (checkpoint / "commits.hidden").rename(checkpoint / "commits")
    assert batch_files(checkpoint, "offsets") == [0, 1]
    assert batch_files(checkpoint, "commits") == [0]
    assert_each_row_once(table, 2000)  # batch 1 is in the table already
    # Spark with delta-spark reads its own table and one delta-rs wrote (docs/lakehouse.md):
    # the restart's driver reads both once its run ends.
    rs_table = tmp_path / "rs"
    write_deltalake(str(rs_table), DeltaTable(str(table)).to_pyarrow_table())
    out: list[str] = []
    assert run_job(url, table, checkpoint, "spark", "none", out, read_after=rs_table) == 0
    assert batch_files(checkpoint, "commits") == [0, 1]
    assert_each_row_once(table, 2000)
    assert [line for line in out if line.startswith("ROWS")] == [
        f"ROWS {table} 2000",
        f"ROWS {rs_table} 2000",
    ]
