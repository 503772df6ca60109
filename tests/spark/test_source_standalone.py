"""The source outside the shared session: a standalone cluster and ``spark-submit``.

The cluster is a master and two workers started from the pyspark install;
executors run in other JVMs (and their own Python workers), so this checks that
the reader pickles, connects and reads correctly away from the driver.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from tests.spark._helpers import publish

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until ``text`` appears in ``log`` (bounded; fails if the process exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{log.name}: process exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{log.name}: {text!r} not seen in {timeout} s")


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A standalone master and two 1-core workers bound to 127.0.0.1; yields the master URL."""
    env = _env(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "work").mkdir()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = tmp_path / "master.log"
        master = _start(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
            master_log,
            env,
        )
        procs.append(master)
        _wait_for(master_log, "I have been elected leader", master, 90)
        for i in range(2):
            log = tmp_path / f"worker{i}.log"
            worker = _start(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(tmp_path / "work" / f"w{i}"),
                    master_url,
                ],
                log,
                env,
            )
            procs.append(worker)
        for i, worker in enumerate(procs[1:]):
            _wait_for(
                tmp_path / f"worker{i}.log", "Successfully registered with master", worker, 90
            )
        yield master_url
    finally:
        for proc in reversed(procs):
            _stop(proc)


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
