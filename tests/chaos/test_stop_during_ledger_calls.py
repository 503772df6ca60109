"""A Processor stopped (by SIGTERM and by ``stop()``) while its ledger calls run on a thread.

Cancelling an ``asyncio.to_thread`` await does not stop the thread, and the stop
used to close the ledger's connection under a call still running there: a
segmentation fault in sqlite3 (``record_floors``, seen in the suite) or libpq. The
worker (``tests/chaos/_stop_worker.py``) stops 200 Processors in a row (half by a
real SIGTERM, half by ``stop()``), a random few milliseconds after each started,
with pruning every 10 ms keeping the ledger's thread busy (and, on PostgreSQL,
every batch running there). It must never crash, never close the ledger while
a call runs on another thread (its instrumented ledger checks every close), exit
0 on the final SIGTERM, and leave every message applied exactly once.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness import publish_n
from oncestream import Connection
from oncestream.server import NatsServer
from tests._support import effects
from tests.chaos.test_processor_kill import _pg_counts

ROOT = Path(__file__).resolve().parents[2]
STREAM, CONSUMER = "WORK", "stopper"


def _pythonpath() -> list[str]:
    """The caller's PYTHONPATH after the repository's (a run against another oncestream)."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _drive(cmd: list[str]) -> tuple[int, str]:
    """Run the worker, SIGTERM it once it has caught up; (exit code, its output)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *_pythonpath()]))
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    watchdog = threading.Timer(600, proc.kill)  # a hung worker ends the loop below
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # ends when the worker exits (or crashes)
            lines.append(line)
            if line.startswith("CAUGHT-UP"):
                proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    return code, "".join(lines)


async def _run(
    nats_server: NatsServer, conn: Connection, make_stream, db: str, rounds: int, total: int
) -> None:  # type: ignore[no-untyped-def]
    await make_stream(STREAM, ("work.>",))
    await publish_n(conn, "work.item", total, window=1000)
    seed = int(os.environ.get("STOP_TEST_SEED", str(random.randrange(1 << 30))))
    print(f"seed={seed}")
    cmd = [sys.executable, "-m", "tests.chaos._stop_worker", nats_server.url, db, STREAM,
           CONSUMER, str(rounds), str(seed)]  # fmt: skip
    code, output = await asyncio.to_thread(_drive, cmd)
    assert "Fatal Python error" not in output, output[-3000:]
    assert "CLOSED-IN-FLIGHT" not in output, output[-3000:]
    assert code == 0, f"worker exited {code}: {output[-3000:]}"
    assert f"ROUNDS {rounds}" in output and "DONE violations=0" in output, output[-3000:]
    count, distinct = _pg_counts(db)[:2] if db.startswith("postgresql://") else effects(Path(db))
    assert distinct == total, f"lost {total - distinct} effects"
    assert count == total, f"{count - total} duplicated effects"


async def test_stopping_a_sqlite_processor_200_times_never_closes_under_a_call(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await _run(nats_server, conn, make_stream, str(tmp_path / "effects.db"), 200, 4000)


@pytest.mark.postgres
async def test_stopping_a_postgres_processor_200_times_never_closes_under_a_call(
    nats_server: NatsServer, conn: Connection, make_stream, postgres_url: str
) -> None:  # type: ignore[no-untyped-def]
    await _run(nats_server, conn, make_stream, postgres_url, 200, 4000)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_stopping_a_processor_2000_times_soak(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path, request, kind: str
) -> None:  # type: ignore[no-untyped-def]
    db = (
        str(tmp_path / "effects.db")
        if kind == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    await _run(nats_server, conn, make_stream, db, 2000, 40_000)
