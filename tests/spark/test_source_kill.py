"""A driver SIGKILLed mid-stream and restarted from its checkpoint writes every message once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.server import NatsServer
from tests.spark._connect_server import ROOT, ConnectServer, job_env
from tests.spark._helpers import publish

pytestmark = pytest.mark.timeout(240)


def _driver(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark._driver_job", *args],
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the driver and everything it started (its JVM, Python workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.mark.parametrize("mode", ["classic", "connect"])
async def test_driver_killed_mid_stream_restarts_exactly_once(
    spark: Any,
    nats_server: NatsServer,
    conn: Connection,
    make_stream: Any,
    tmp_path: Path,
    mode: str,
    request: pytest.FixtureRequest,
) -> None:
    """Classic: the driver process is killed. Connect: the Connect server (the driver) is
    killed, the restart runs on another one (the test session's shared server)."""
    await make_stream("KILL", ("kill.>",))
    await publish(conn, "kill.x", 120)
    published = 120
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    server = ConnectServer(tmp_path / "connect").start() if mode == "connect" else None
    try:
        master = [server.url] if server is not None else []
        proc = _driver("stream", nats_server.url, "KILL", out, checkpoint, "run", *master)
        try:
            assert proc.stdout is not None
            batches = 0
            for line in proc.stdout:  # bounded by the test timeout and by the job's own 600 s
                if line.startswith("PROGRESS") and int(line.split()[2]) > 0:
                    # PySpark < 4.2 (no maxMessagesPerTrigger) read all 120 at once: more arrive.
                    await publish(conn, "kill.x", 20, start=published)
                    published += 20
                    batches += 1
                    if batches >= 2:
                        break
            assert batches >= 2, "the driver exited before two batches completed"
        finally:
            if server is not None:
                server.kill()  # the driver under Connect
            _kill_group(proc)
        if server is None:
            assert proc.returncode == -signal.SIGKILL
    finally:
        if server is not None:
            server.kill()
    first = spark.read.parquet(out).count()
    assert 0 < first <= published  # the restart reads the rest and 30 more
    await publish(conn, "kill.x", 30, start=published)
    published += 30
    master = [request.getfixturevalue("connect_server").url] if mode == "connect" else []
    proc = _driver("stream", nats_server.url, "KILL", out, checkpoint, "finish", *master)
    try:
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.returncode is None:
            _kill_group(proc)
    seqs = sorted(r.sequence for r in spark.read.parquet(out).select("sequence").collect())
    assert seqs == list(range(1, published + 1))
