"""Recovery time of a Processor restarted after SIGKILL (group "recovery", seconds).

A worker process (``tests.chaos._processor_worker``: a Processor with the
default batch of 4,000, ``ack_wait`` 30 s, a SQLite ledger) works through
100,000 messages on five subjects and is SIGKILLed once it has applied a
fifth of them, holding thousands delivered and unacknowledged. A new worker
is started at once; the recovery is the time from its start (process start-up
included) until the consumer has nothing pending and nothing unacknowledged.
The baseline is the same work left at the rate the killed worker had: a
recovery close to it means the restart lost no time on what the dead one
held (before issue 38 the held messages only came back after the ack wait,
behind the newer ones: about 30 s more).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import fresh_server, report

from oncestream import Connection, ConnectOptions, StreamNotFound, connect
from oncestream.streams import StreamSpec, ensure_stream

ROOT = Path(__file__).resolve().parent.parent
GROUP = "recovery"
TOTAL = int(os.environ.get("BENCH_RECOVERY_N", "100000"))
REPEAT = int(os.environ.get("BENCH_RECOVERY_REPEAT", "1"))
ACK_WAIT = 30.0
STREAM, CONSUMER = "RC", "worker"


def _worker(url: str, db: Path) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, (os.environ.get("PYTHONPATH"), str(ROOT))))
    env = dict(os.environ, PYTHONPATH=path, BATCH="4000", ACK_WAIT=str(ACK_WAIT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.chaos._processor_worker", url, str(db), STREAM, CONSUMER],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def _applied(db: Path) -> int:
    try:
        con = sqlite3.connect(db, timeout=30)
    except sqlite3.Error:
        return 0
    try:
        return int(con.execute("SELECT count(*) FROM effects").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


async def _publish(conn: Connection) -> None:
    js = conn.nc.jetstream()
    pending = []
    for i in range(TOTAL):
        pending.append(await js.publish_async(f"rc.s{i % 5}", b"%d" % i))
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def one(url: str, work: Path) -> dict[str, float]:
    db = work / f"ledger-{time.monotonic_ns()}.db"
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        with contextlib.suppress(StreamNotFound):
            await conn.api(f"STREAM.DELETE.{STREAM}", {})
        await ensure_stream(conn, StreamSpec(name=STREAM, subjects=("rc.>",)))
        await _publish(conn)
        first = _worker(url, db)
        second: subprocess.Popen[str] | None = None
        try:
            assert first.stdout is not None
            if "READY" not in first.stdout.readline():
                raise RuntimeError("the first worker did not start")
            began = time.monotonic()
            marks: list[tuple[float, int]] = []  # the rate from a tenth to a fifth applied
            for mark in (TOTAL // 10, TOTAL // 5):
                while (applied := _applied(db)) < mark:
                    if time.monotonic() - began > 120:
                        raise RuntimeError(f"the first worker applied only {applied} in 120 s")
                    await asyncio.sleep(0.01)
                marks.append((time.monotonic(), applied))
            rate = (marks[1][1] - marks[0][1]) / (marks[1][0] - marks[0][0])
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
            info = await conn.consumer_info(STREAM, CONSUMER)
            applied, held = _applied(db), int(info["num_ack_pending"])
            restarted = time.monotonic()
            second = _worker(url, db)
            while info["num_pending"] or info["num_ack_pending"]:
                if time.monotonic() - restarted > 3 * ACK_WAIT:
                    raise RuntimeError(f"not caught up after {3 * ACK_WAIT:g}s: {info}")
                await asyncio.sleep(0.02)
                info = await conn.consumer_info(STREAM, CONSUMER)
            recovery = time.monotonic() - restarted
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                if proc is not None:
                    proc.wait()
                    if proc.stdout is not None:
                        proc.stdout.close()
        if _applied(db) != TOTAL:
            raise RuntimeError(f"{_applied(db)} effects for {TOTAL} messages")
        left = TOTAL - applied
        return {
            "recovery": recovery, "ideal": left / rate, "left": left, "rate": rate, "held": held
        }  # fmt: skip


async def main() -> None:
    server = fresh_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [await one(server.url, Path(tmp)) for _ in range(REPEAT)]
    finally:
        server.close()
    best = min(runs, key=lambda r: r["recovery"])
    report(
        GROUP,
        f"the work left after the kill, at the killed worker's rate ({TOTAL:,} msgs)",
        round(best["ideal"], 2),
        "s",
        baseline=True,
        left=int(best["left"]),
        rate=round(best["rate"]),
    )
    report(
        GROUP,
        f"SIGKILL at 1/5 applied -> restart -> caught up (ack_wait {ACK_WAIT:g}s)",
        round(best["recovery"], 2),
        "s",
        held=int(best["held"]),
        runs=[round(r["recovery"], 2) for r in runs],
    )


if __name__ == "__main__":
    asyncio.run(main())
