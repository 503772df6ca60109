"""Spark Connect: the jetstream source and sink through a separately started server.

The server is pyspark's own ``sbin/start-connect-server.sh`` (``--wait``: in
the foreground, so it is stopped by PID), bound to 127.0.0.1 on a free port,
its Python workers on this interpreter, as docs/deploy.md tells a user to
start it; the client reaches it with ``sc://127.0.0.1:PORT``. One subprocess
holds the one Connect session (a process cannot also hold the shared classic
session); the tests below check what it printed, and the server's log.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from harness import free_port
from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
ROWS = 100


async def _publish(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="IN", subjects=("in.>",)))
        js = conn.nc.jetstream()
        for i in range(ROWS):
            await js.publish(f"in.{i % 3}", b"m%d" % i, headers={"Nats-Msg-Id": f"m-{i}"})


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, (
            f"Connect server exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        )
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)  # polling a port: no event to await from another process
    raise AssertionError(
        f"Connect server not listening after {timeout}s:\n{log.read_text()[-3000:]}"
    )


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``start-connect-server.sh --wait`` from pyspark's ``sbin/``: (``sc://`` URL, its log)."""
    work = tmp_path_factory.mktemp("connect-server")
    port = free_port()
    log = work / "connect-server.log"
    spark_home = Path(pyspark.__file__).parent  # a pip install's SPARK_HOME
    env = dict(
        os.environ,
        SPARK_HOME=str(spark_home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_PID_DIR=str(work),
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(spark_home / "sbin" / "start-connect-server.sh"), "--wait",
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


@pytest.fixture(scope="module")
def connect_run(
    connect_server: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, object]]:
    remote, _ = connect_server
    work = tmp_path_factory.mktemp("connect")
    server = NatsServer(server_configs.jetstream(work / "nats"), work_dir=work / "nats")
    server.start()
    try:
        asyncio.run(_publish(server.url))
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tests" / "spark" / "_connect_job.py"),
                server.url,
                str(work),
                remote,
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        print(proc.stdout)
        yield {
            key: json.loads(value)
            for key, value in (
                line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line
            )
            if key.isupper()
        }
    finally:
        server.close()


def test_connect_session_and_worker_check(connect_run: dict[str, object]) -> None:
    session = connect_run["SESSION"]
    assert isinstance(session, dict) and session["type"].startswith("pyspark.sql.connect")
    assert "REGISTER" in connect_run  # the worker check ran as a one-row task and passed


def test_connect_batch_read(connect_run: dict[str, object]) -> None:
    assert connect_run["READ"] == list(range(1, ROWS + 1))


def test_connect_batch_write(connect_run: dict[str, object]) -> None:
    assert connect_run["WRITE"] == ROWS


def test_connect_streaming_source_to_sink(connect_run: dict[str, object]) -> None:
    assert connect_run["STREAM"] == {"rows": ROWS, "lag": {"IN": 0}}


def test_connect_sink_logs_go_to_the_servers_log(
    connect_run: dict[str, object], connect_server: tuple[str, Path]
) -> None:
    """What docs/deploy.md says: the sink runs in the server, so its lines are in its log."""
    _, log = connect_server
    text = log.read_text(errors="replace")
    assert "jetstream sink committed micro-batch" in text, text[-3000:]
