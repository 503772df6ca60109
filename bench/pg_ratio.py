"""The PostgreSQL Processor beside the SQLite one, with the CPU of every process and thread.

One fresh nats-server and one throw-away PostgreSQL (harness); N stored 128-byte
messages; per round, ``processor()`` of bench/bench_process.py with an SQLite ledger
and with a PostgreSQL one (bench/_scale_cases.py's handler: one INSERT per message),
each on a consumer of its own. Printed per case: the rate, and CPU microseconds per
message of this process, of each of its threads (the event loop, the ledger's
thread), of every PostgreSQL process and of nats-server, sampled from /proc every
0.1 s (the ledger's thread and backend end with the Processor). ``--spy FILE``
records the PostgreSQL case with py-spy (``pip install py-spy``; raw stacks).
``--merge``: the ledger's ``merge_inserts`` (``auto`` is its default).

Run: ``flock /tmp/oncestream-heavy.lock .venv/bin/python bench/pg_ratio.py 1e5 --rounds 2``.
With ``PGPROF_ROOT``/``PYTHONPATH`` set to another checkout it measures that code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("PGPROF_ROOT", str(Path(__file__).resolve().parent.parent)))

from bench._common import PAYLOAD_128
from bench._scale_cases import _pg_insert
from bench.bench_process import processor, sqlite_ledger

from harness import PostgresServer, publish_n
from oncestream import ConnectOptions, PostgresLedger, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream

TICK = os.sysconf("SC_CLK_TCK")
MERGE: dict[str, Any] = {"off": False, "on": True, "auto": "auto"}


def cpu(path: str) -> float:
    """CPU seconds of a /proc stat file (0.0 when gone)."""
    try:
        with open(path, "rb") as fh:
            stat = fh.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
        except OSError:
            pass
    return pids


class Sampler:
    """The last CPU seen of each PostgreSQL process and each thread of this one."""

    def __init__(self, pg_pid: int) -> None:
        self.pg_pid = pg_pid
        self.seen: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self._stop = threading.Event()
        self._take(first=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _take(self, first: bool = False) -> None:
        now = {f"pg:{p}": cpu(f"/proc/{p}/stat") for p in descendants(self.pg_pid)}
        for task in os.listdir("/proc/self/task"):
            now[f"thread:{task}"] = cpu(f"/proc/self/task/{task}/stat")
        for key, used in now.items():
            if used:
                self.seen[key] = used
            if first:
                self.first[key] = used

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._take()

    def stop(self) -> tuple[float, dict[str, float]]:
        """(PostgreSQL CPU seconds, CPU seconds per thread) since the start."""
        self._stop.set()
        self._thread.join()
        self._take()
        used = {k: v - self.first.get(k, 0.0) for k, v in self.seen.items()}
        pg = sum(v for k, v in used.items() if k.startswith("pg:"))
        return pg, {k: v for k, v in used.items() if k.startswith("thread:")}


def start_spy(out: str) -> subprocess.Popen[bytes]:
    """py-spy recording this process into ``out`` (raw stacks, per thread)."""
    return subprocess.Popen(
        [os.environ.get("PY_SPY", "py-spy"), "record", "--pid", str(os.getpid()),
         "--rate", "250", "--nonblocking", "--threads", "--format", "raw", "-o", out],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def run_case(
    conn: Any, pg: PostgresServer, kind: str, round_: int, args: argparse.Namespace, work: Path
) -> None:
    import psycopg

    n = int(args.n)
    cases = work / f"{kind}{round_}"
    cases.mkdir()
    if kind == "sqlite":
        ledger: Any = sqlite_ledger(cases)
        handler: dict[str, Any] = {}
    else:
        name = f"r{round_}"
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        ledger = PostgresLedger(
            pg.url.rsplit("/", 1)[0] + "/" + name, merge_inserts=MERGE[args.merge]
        )
        ledger.open()
        ledger.connection.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, body BYTEA)")
        ledger.connection.commit()
        handler = {"handler": _pg_insert}
    server_before, self_before = cpu(f"/proc/{args.server_pid}/stat"), cpu("/proc/self/stat")
    sampler = Sampler(pg.pid or 0)
    spy = start_spy(args.spy) if args.spy and kind == "postgres" else None
    started = time.perf_counter()
    rate, rows = await processor(
        conn, n, cases, consumer=f"c_{kind}_{round_}", ledger=ledger, **handler
    )
    wall = time.perf_counter() - started
    pg_used, threads = sampler.stop()
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    us = {
        "client": round((cpu("/proc/self/stat") - self_before) / n * 1e6, 2),
        "postgres": round(pg_used / n * 1e6, 2),
        "nats-server": round((cpu(f"/proc/{args.server_pid}/stat") - server_before) / n * 1e6, 2),
    }
    busy = {k: round(v / n * 1e6, 2) for k, v in threads.items() if v > 0.01 * wall}
    label = kind if kind == "sqlite" else f"postgres merge_inserts={args.merge}"
    print(
        f"RESULT round={round_} {label} rate={rate:,.0f} rows={rows} us/msg={us}"
        f" threads={busy} load={os.getloadavg()[0]:.2f}",
        flush=True,
    )
    ledger.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=float)
    parser.add_argument("--spy", default="")
    parser.add_argument("--merge", default="auto", choices=sorted(MERGE))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="sqlite,postgres")
    args = parser.parse_args()
    server = NatsServer().start()
    pg = PostgresServer().start()
    args.server_pid = server.pid
    work = Path(tempfile.mkdtemp(prefix="pg-ratio-"))
    try:
        conn = await connect(ConnectOptions(servers=(server.url,)))
        await ensure_stream(conn, StreamSpec(name="BENCH", subjects=("bench.>",)))
        await publish_n(conn, "bench.p", int(args.n), data=lambda _: PAYLOAD_128)
        for round_ in range(args.rounds):
            for kind in args.only.split(","):
                await run_case(conn, pg, kind, round_, args, work)
        await conn.close()
    finally:
        server.close()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
