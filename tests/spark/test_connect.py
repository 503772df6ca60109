"""Spark Connect: the jetstream source and sink through ``remote("local[2]")`` (issue 12).

One subprocess holds the one Connect session (a process cannot also hold the
shared classic session); the tests below check what it printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def connect_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    work = tmp_path_factory.mktemp("connect")
    server = NatsServer(server_configs.jetstream(work / "nats"), work_dir=work / "nats")
    server.start()
    try:
        asyncio.run(_publish(server.url))
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tests" / "spark" / "_connect_job.py"),
                server.url,
                str(work),
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
