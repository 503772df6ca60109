"""A ledger call interrupted while PostgreSQL does not answer (paused, or cut off) must
not freeze the process: :meth:`PostgresLedger.interrupt` sends its cancel off the
caller's thread, and the cancel must let the other threads run while it waits.

psycopg's blocking ``cancel()`` (libpq's ``PQcancel``) held the GIL while it waited
for the postmaster: every thread of the process, the event loop's too, stopped until
PostgreSQL answered (seen as a 6-minute hang of the test session, 2026-11-30). The
scenario runs in a child process, so a frozen interpreter cannot freeze the test: the
test resumes the postmaster and kills the child (by PID) whatever happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import PostgresServer

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
from oncestream.ledger import PostgresLedger
ledger = PostgresLedger(sys.argv[1])
ledger.open()
print("open", flush=True)
sys.stdin.readline()  # the postmaster is paused now
ledger.interrupt()
ticks, start = 0, time.monotonic()
while time.monotonic() - start < 1.0:
    ticks += 1
print("ticks", ticks, flush=True)
"""


def test_an_interrupt_while_postgresql_does_not_answer_does_not_freeze_the_process(
    tmp_path: Path,
) -> None:
    server = PostgresServer().start()  # its own: the shared one is not paused under others
    postmaster = server.pid
    assert postmaster is not None
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, server.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=env,
    )  # fmt: skip
    paused = False
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "open"
        os.kill(postmaster, signal.SIGSTOP)
        paused = True
        child.stdin.write("go\n")
        child.stdin.flush()
        try:
            out, _ = child.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("the process froze while its cancel waited for the postmaster")
        ticks = [int(line.split()[1]) for line in out.splitlines() if line.startswith("ticks")]
        assert ticks and ticks[0] > 10_000, out  # the main thread ran meanwhile
    finally:
        if paused:
            os.kill(postmaster, signal.SIGCONT)
        if child.poll() is None:
            child.kill()  # by PID
            child.wait(10)
        server.stop()


def test_an_interrupt_cancels_the_running_statement(postgres_url: str) -> None:
    """What the cancel is for: the statement running on the ledger's connection ends."""
    import threading
    import time

    import psycopg

    from oncestream.ledger import PostgresLedger

    ledger = PostgresLedger(postgres_url)
    ledger.open()
    con = ledger.connection
    timer = threading.Timer(0.5, ledger.interrupt)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            con.execute("SELECT pg_sleep(30)")
    finally:
        timer.cancel()
        con.rollback()
        ledger.close()
    assert time.monotonic() - started < 10
