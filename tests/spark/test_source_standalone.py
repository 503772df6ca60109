"""The source outside the shared session: a standalone cluster and ``spark-submit``.

The cluster is a master and two workers started from the pyspark install;
executors run in other JVMs (and their own Python workers), so this checks that
the reader pickles, connects and reads correctly away from the driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from tests.spark._cluster import SPARK_HOME, standalone_cluster
from tests.spark._helpers import publish

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp: Path) -> dict[str, str]:
    return dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_WORKER_DIR=str(tmp / "work"),
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT),
    )


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A standalone master and two 1-core workers bound to 127.0.0.1; yields the master URL."""
    dirs = [tmp_path / "work" / f"w{i}" for i in range(2)]
    with standalone_cluster(tmp_path, _env(tmp_path), dirs) as master_url:
        yield master_url


# make soak (a standalone master and worker of its own, 95 s): make test runs the
# jetstream source and sink on a standalone cluster in test_deploy.py.
@pytest.mark.soak
async def test_standalone_cluster_read(
    standalone: str,
    nats_server: NatsServer,
    conn: Connection,
    make_stream: Any,
    tmp_path: Path,
) -> None:
    await make_stream("CLU", ("clu.>",))
    await publish(conn, "clu.a", 150)
    env = _env(tmp_path)
    proc = subprocess.run(  # noqa: ASYNC221 - the test has nothing else to do meanwhile
        [
            sys.executable,
            "-m",
            "tests.spark._driver_job",
            "count",
            nats_server.url,
            "CLU",
            standalone,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(
        line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("SEQ", "EXE"))
    )
    sequences = json.loads(lines["SEQUENCES"])
    assert sorted(sequences) == list(range(1, 151))
    assert int(lines["EXECUTORS"]) >= 1


async def test_spark_submit_local(
    nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("SUBMIT", ("submit.>",))
    await publish(conn, "submit.a", 40)
    env = _env(tmp_path)
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    proc = subprocess.run(  # noqa: ASYNC221 - the test has nothing else to do meanwhile
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master",
            "local[2]",
            str(ROOT / "tests" / "spark" / "_driver_job.py"),
            "count",
            nats_server.url,
            "SUBMIT",
            "local[2]",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("SEQUENCES "))
    assert sorted(json.loads(line.split(" ", 1)[1])) == list(range(1, 41))
