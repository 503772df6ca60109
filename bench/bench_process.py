"""Exactly-once processing vs naive nats-py consumers (group "process").

Same run, same fresh server, one stream of 128-byte messages, a fresh durable
pull consumer per case:

- nats-py ``fetch(500)`` + ``ack_sync()`` per message (the naive "double ack"
  exactly-once recipe; measured over fewer messages to keep it short), baseline;
- nats-py ``fetch(500)`` + ``ack()`` (at-least-once, for scale), baseline;
- oncestream ``Processor`` + ``SQLiteLedger`` (default FULL sync) with a handler
  inserting one row per message into a temp-file database, once with the default
  explicit acks (one ack per message) and once with ``ack_policy="all"`` (one
  confirmed ack per batch); each with its client and server CPU microseconds per
  message (``client_us``, ``server_us``: this process and the nats-server).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PAYLOAD_128, fresh_server, report
from bench._cpu import CpuSampler

from harness import publish_n
from oncestream import (
    ConnectOptions,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from oncestream.streams import StreamSpec, ensure_stream

TOTAL = int(os.environ.get("BENCH_PROCESS_MESSAGES", "100000"))
ACK_SYNC_MESSAGES = int(os.environ.get("BENCH_PROCESS_ACK_SYNC_MESSAGES", "15000"))
GROUP = "process"


async def publish(conn, count: int) -> None:  # type: ignore[no-untyped-def]
    await publish_n(conn, "bench.p", count, data=lambda _: PAYLOAD_128)


async def naive(conn, durable: str, count: int, sync: bool) -> float:  # type: ignore[no-untyped-def]
    js = conn.nc.jetstream()
    sub = await js.pull_subscribe("bench.p", durable=durable, stream="BENCH")
    done = 0
    started = time.perf_counter()
    while done < count:
        msgs = await sub.fetch(min(500, count - done), timeout=5)
        for msg in msgs:
            if sync:
                await msg.ack_sync()
            else:
                await msg.ack()
        done += len(msgs)
    await conn.nc.flush()
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    return count / elapsed


def insert_row(msg, tx) -> None:  # type: ignore[no-untyped-def]
    tx.execute("INSERT INTO effects (body) VALUES (?)", (msg.data,))


def insert_rows(msgs, tx) -> None:  # type: ignore[no-untyped-def]
    """The same effect as :func:`insert_row` for a whole transaction (a batch handler)."""
    tx.executemany("INSERT INTO effects (body) VALUES (?)", [(m.data,) for m in msgs])


def sqlite_ledger(work: Path) -> SQLiteLedger:
    """An SQLite ledger in ``work/effects.db`` holding the handler's ``effects`` table."""
    ledger = SQLiteLedger(work / "effects.db")
    ledger.open()
    ledger.connection.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, body BLOB)")
    return ledger


async def processor(  # type: ignore[no-untyped-def]
    conn,
    count: int,
    work: Path,
    *,
    stream: str = "BENCH",
    consumer: str = "oncestream",
    ledger=None,
    handler=insert_row,
    batch_handler=None,
    ack_policy: str = "explicit",
) -> tuple[float, int]:
    """Run a Processor (SQLite ledger by default) until ``count`` messages; (msg/s, rows).

    ``batch_handler``: run with it instead of ``handler`` (one call per transaction).
    ``ack_policy``: of the consumer it creates (``"all"``: one ack per batch).
    """
    ledger = ledger or sqlite_ledger(work)
    handlers = {"batch_handler": batch_handler} if batch_handler else {"handler": handler}
    proc = Processor(
        conn,
        stream,
        consumer,
        **handlers,
        ledger=ledger,
        options=ProcessorOptions(prune_interval=0, ack_policy=ack_policy),  # the default batch
    )
    started = time.perf_counter()
    task = asyncio.create_task(proc.run())
    # At least 1k msg/s (10^7 messages may take hours on PostgreSQL under load).
    limit = max(300.0, count / 1000)
    await proc.wait_until(lambda s: s.applied + s.suppressed >= count, timeout=limit)
    elapsed = time.perf_counter() - started
    await proc.stop()
    await task
    if isinstance(ledger, SQLiteLedger):
        rows = sqlite3.connect(ledger.path).execute("SELECT count(*) FROM effects").fetchone()[0]
    else:
        ledger.open()
        rows = ledger.connection.execute("SELECT count(*) FROM effects").fetchone()[0]
    return count / elapsed, int(rows)


async def main() -> None:
    server = fresh_server()
    work = Path(tempfile.mkdtemp(prefix="bench-process-"))
    try:
        conn = await connect(ConnectOptions(servers=(server.url,)))
        await ensure_stream(conn, StreamSpec(name="BENCH", subjects=("bench.>",)))
        await publish(conn, TOTAL)
        rate = await naive(conn, "naive_ack_sync", ACK_SYNC_MESSAGES, sync=True)
        report(
            GROUP, "nats-py fetch(500)+ack_sync", rate, baseline=True, messages=ACK_SYNC_MESSAGES
        )
        rate = await naive(conn, "naive_ack", TOTAL, sync=False)
        report(GROUP, "nats-py fetch(500)+ack", rate, baseline=True, messages=TOTAL)
        for policy, case in (
            ("explicit", "oncestream Processor+SQLite ledger"),
            ("all", "oncestream Processor+SQLite ledger, ack_policy all"),
        ):
            cases = work / policy
            cases.mkdir()
            sampler = CpuSampler().start()
            rate, rows = await processor(
                conn, TOTAL, cases, consumer=f"oncestream_{policy}", ack_policy=policy
            )
            cpu = sampler.stop()
            if rows != TOTAL:
                raise SystemExit(f"processor ({policy}) applied {rows} rows, expected {TOTAL}")
            report(
                GROUP,
                case,
                rate,
                messages=TOTAL,
                notes="handler inserts one row per message; synchronous=FULL",
                # CPU microseconds per message: this process (the Processor) and the server.
                client_us=round(cpu.get("driver", 0.0) / TOTAL * 1e6, 2),
                server_us=round(cpu.get("nats-server", 0.0) / TOTAL * 1e6, 2),
            )
        await conn.close()
    finally:
        server.close()
        shutil.rmtree(work)


if __name__ == "__main__":
    asyncio.run(main())
