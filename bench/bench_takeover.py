"""Takeover time of active/standby Processors (group "takeover", seconds, lower is better).

Two worker processes (``tests.chaos._standby_worker``: a Processor in a pinned
priority group, one shared SQLite ledger) on a fresh server; a producer
publishes steadily; the active one is SIGKILLed; the time from the kill to
the standby's first applied message is the takeover. The pin TTL
(``ProcessorOptions.pinned_ttl``, CLI ``--takeover-after``) bounds it: the server
hands the pin to a standby once the active one sent no pull request for that long.
No naive counterpart exists (two plain consumers never "take over": a killed
worker's held messages come back after the ack wait, behind newer ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import fresh_server, report

from oncestream import ConnectOptions, StreamNotFound, connect
from oncestream.streams import StreamSpec, ensure_stream

ROOT = Path(__file__).resolve().parent.parent
GROUP = "takeover"
TTLS = tuple(float(t) for t in os.environ.get("BENCH_TAKEOVER_TTLS", "2,5").split(","))
REPEAT = int(os.environ.get("BENCH_TAKEOVER_REPEAT", "3"))


def _worker(url: str, db: Path, name: str, ttl: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.chaos._standby_worker", url, str(db), name, "TK", "svc",
         str(ttl)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _wait_for(proc: subprocess.Popen[str], needle: str, timeout: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if needle in line:
            return
    raise RuntimeError(f"worker: no {needle!r} within {timeout}s")


def _first_apply_after(db: Path, worker: str, since: float) -> float | None:
    con = sqlite3.connect(db, timeout=30)
    try:
        row = con.execute(
            "SELECT min(at) FROM effects WHERE worker = ? AND at >= ?", (worker, since)
        ).fetchone()
        return None if row[0] is None else float(row[0])
    finally:
        con.close()


async def one(url: str, ttl: float, work: Path) -> float:
    db = work / f"ledger-{time.monotonic_ns()}.db"
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        with contextlib.suppress(StreamNotFound):
            await conn.api("STREAM.DELETE.TK", {})
        await ensure_stream(conn, StreamSpec(name="TK", subjects=("tk.>",)))
        js = conn.nc.jetstream()
        active = _worker(url, db, "A", ttl)
        standby: subprocess.Popen[str] | None = None
        try:
            _wait_for(active, "READY", 30)
            await js.publish("tk.x", b"0")
            _wait_for(active, "now the active one", 30)
            standby = _worker(url, db, "B", ttl)
            _wait_for(standby, "READY", 30)
            killed = time.time()
            os.kill(active.pid, signal.SIGKILL)
            first = None
            deadline = time.monotonic() + ttl + 30
            while first is None and time.monotonic() < deadline:
                await js.publish("tk.x", b"1")
                await asyncio.sleep(0.01)  # a steady producer, 100 msg/s
                first = _first_apply_after(db, "B", killed)
            if first is None:
                raise RuntimeError("the standby never took over")
            return first - killed
        finally:
            for proc in (active, standby):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                if proc is not None:
                    proc.wait()
                    if proc.stdout is not None:
                        proc.stdout.close()


async def main() -> None:
    server = fresh_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for ttl in TTLS:
                times = [await one(server.url, ttl, Path(tmp)) for _ in range(REPEAT)]
                report(
                    GROUP,
                    f"SIGKILL -> standby applies, pinned_ttl {ttl:g}s (median of {REPEAT})",
                    round(statistics.median(times), 2),
                    "s",
                    max=round(max(times), 2),
                    runs=[round(t, 2) for t in times],
                )
    finally:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
