"""Spark Connect: the jetstream source and sink through a separately started server.

The server is the test session's shared one (the ``connect_server`` fixture:
pyspark's own ``sbin/start-connect-server.sh``, bound to 127.0.0.1 on a free
port, its Python workers on this interpreter, as docs/deploy.md tells a user
to start it; tests/spark/_connect_server.py); the client reaches it with
``sc://127.0.0.1:PORT``. One subprocess holds the one Connect session (a
process cannot also hold the shared classic session); the tests below check
what it printed, and the server's log.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs
from tests.spark._connect_server import ConnectServer, job_env

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
ROWS = 100


async def _publish(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="IN", subjects=("in.>",)))
        js = conn.nc.jetstream()
        for i in range(ROWS):
            await js.publish(f"in.{i % 3}", b"m%d" % i, headers={"Nats-Msg-Id": f"m-{i}"})


@pytest.fixture(scope="module")
def connect_run(
    connect_server: ConnectServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, object]]:
    remote = connect_server.url
    work = tmp_path_factory.mktemp("connect")
    server = NatsServer(server_configs.jetstream(work / "nats"), work_dir=work / "nats")
    server.start()
    try:
        asyncio.run(_publish(server.url))
        env = job_env()
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
    connect_run: dict[str, object], connect_server: ConnectServer
) -> None:
    """What docs/deploy.md says: the sink runs in the server, so its lines are in its log."""
    text = connect_server.log.read_text(errors="replace")
    assert "jetstream sink committed micro-batch" in text, text[-3000:]


def test_local_session_in_a_connect_process_is_refused(connect_server: ConnectServer) -> None:
    """A process holds one kind of session: ``local_session()`` says so and starts no JVM."""
    from tests.spark._connect_server import run_connect_job

    message = run_connect_job(connect_server.url, "local_session_refused", {})
    assert "holds a Spark Connect session" in message and "register(spark)" in message, message
