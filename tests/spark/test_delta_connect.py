"""oncestream.spark.delta under Spark Connect: the batch function runs on the server.

A separately started Connect server runs the foreachBatch function in its own
Python worker. It is started as pyspark's ``sbin/start-connect-server.sh`` starts
it, with ``bin/spark-submit --class ...SparkConnectServer``: the pip package of
PySpark 4.0 has no ``sbin/``, and this test runs on 4.0 too (``make test``). The query fails once
right after a Delta commit; the restarted query replays that batch and the table,
read back with deltalake, holds every message once. Without ``query_name`` the
function cannot tell which query calls it there, and the query fails naming it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from deltalake import DeltaTable

from oncestream.server import NatsServer
from tests import server_configs
from tests._support import free_port
from tests.spark.test_connect import ROWS, _publish, _wait_listening

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Spark Connect server on 127.0.0.1 (``sc://`` URL, its log), workers on this python."""
    work = tmp_path_factory.mktemp("delta-connect-server")
    port = free_port()
    log = work / "connect-server.log"
    spark_home = Path(pyspark.__file__).parent  # a pip install's SPARK_HOME
    env = dict(
        os.environ,
        SPARK_HOME=str(spark_home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(spark_home / "bin" / "spark-submit"),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "Spark Connect server",
                "--master", "local[2]",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", "spark.driver.host=127.0.0.1",
                "--conf", f"spark.local.dir={work / 'spark-local'}",
                "--driver-java-options", f"-Djava.io.tmpdir={work}",
            ],
            env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_listening(port, proc, log, timeout=120)
        yield f"sc://127.0.0.1:{port}", log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_delta_under_connect_replays_once_and_needs_a_query_name(
    connect_server: tuple[str, Path], tmp_path: Path
) -> None:
    remote, _ = connect_server
    server = NatsServer(server_configs.jetstream(tmp_path / "nats"), work_dir=tmp_path / "nats")
    server.start()
    try:
        asyncio.run(_publish(server.url))
        job = ROOT / "tests" / "spark" / "_delta_connect_job.py"
        proc = subprocess.run(
            [sys.executable, str(job), server.url, str(tmp_path), remote],
            cwd=tmp_path,
            env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
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
    assert table.transaction_version("orders") >= crashed
    assert "query_name" in steps["NONAME"]["error"]
    assert not (tmp_path / "nameless").exists()
