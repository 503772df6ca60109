"""oncestream.spark.delta under Spark Connect: the batch function runs on the server.

A separately started Connect server (the test session's, tests/spark/_connect_server.py,
which starts it with ``bin/spark-submit`` where PySpark 4.0's pip package has no
``sbin/``: this test runs on 4.0 too) runs the foreachBatch function in its own
Python worker. The query fails once
right after a Delta commit; the restarted query replays that batch and the table,
read back with deltalake, holds every message once. Without ``query_name`` or
``checkpoint_location`` the function cannot tell which query calls it there, and
``delta()`` refuses up front naming both; with ``checkpoint_location`` the Delta app
id is the query id Spark keeps in the checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from oncestream.server import NatsServer
from tests import server_configs
from tests.spark._connect_server import ConnectServer, job_env
from tests.spark.test_connect import ROWS, _publish

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_delta_under_connect_replays_once_and_needs_its_checkpoint(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    remote = connect_server.url
    server = NatsServer(server_configs.jetstream(tmp_path / "nats"), work_dir=tmp_path / "nats")
    server.start()
    try:
        asyncio.run(_publish(server.url))
        job = ROOT / "tests" / "spark" / "_delta_connect_job.py"
        proc = subprocess.run(
            [sys.executable, str(job), server.url, str(tmp_path), remote],
            cwd=tmp_path,
            env=job_env(),
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    steps = {
        key: json.loads(value)
        for key, value in (line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
        if key.isupper()
    }
    assert "planted crash" in steps["FIRST"]["error"]
    assert steps["SECOND"]["error"] is None
    table = DeltaTable(str(tmp_path / "orders"))
    sequences = sorted(r["sequence"] for r in table.to_pyarrow_table().to_pylist())
    assert sequences == list(range(1, ROWS + 1))  # the replayed batch was not written twice
    crashed = int((tmp_path / "crashed-once").read_text())
    first_id = json.loads((tmp_path / "chk" / "metadata").read_text())["id"]
    assert table.transaction_version(first_id) >= crashed
    assert "needs checkpoint_location" in steps["NONAME"]["error"]
    assert not (tmp_path / "nameless").exists()
    # A new checkpoint under the same name is a new query: its one batch is written too.
    assert steps["NEWCKPT"]["errors"] == [None, None]
    twice = DeltaTable(str(tmp_path / "twice")).to_pyarrow_table()
    assert twice.num_rows == 2 * ROWS
    # Another query's checkpoint_location: refused (it holds a commit of the batch).
    assert "checkpointLocation" in (steps["WRONGCKPT"]["error"] or ""), steps["WRONGCKPT"]
    assert len(DeltaTable(str(tmp_path / "orders")).to_pyarrow_table()) == ROWS
    # checkpoint_location: the app id is the query id Spark keeps in the checkpoint.
    assert steps["SCOPED"]["error"] is None
    query_id = json.loads((tmp_path / "chk3" / "metadata").read_text())["id"]
    scoped = DeltaTable(str(tmp_path / "scoped"))
    assert scoped.transaction_version(query_id) is not None
    assert sorted(r["sequence"] for r in scoped.to_pyarrow_table().to_pylist()) == list(
        range(1, ROWS + 1)
    )
