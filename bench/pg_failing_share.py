"""A PostgreSQL Processor when a share of the messages fails: rate, commits, rollbacks.

One fresh nats-server and one throw-away PostgreSQL with ``fsync`` on (PostgreSQL's
default; harness's test server has it off); per case, N stored messages on a stream
of their own, then one Processor (a pinned priority group's active one, as the fault
campaign's PostgreSQL pair, unless ``--unpinned``) on a database of its own, with the
library's defaults otherwise. Its handler refuses the messages whose key falls in the
failing share (on every delivery: dead-lettered after ``max_deliver``, the campaign's
``dead_letters=keep``); per message (``tx.execute(INSERT ...)``) or per batch (one
``COPY``). Printed per case, one JSON line: seconds until every other message was
applied and that rate (``apply_rate``), pulled batches and messages per batch, and
the database's commits and rollbacks (``pg_stat_database``; it lags by up to a
second, so a case of a few transactions may show 0-2). ``--reset``: then the
consumer is reset to sequence 1 (``oncestream.streams.reset_consumer``, as the
campaign's ``consumer-reset`` fault does) and the same is printed for the second
pass, until every applied message was delivered again and suppressed.

Run: ``flock /tmp/oncestream-heavy.lock .venv/bin/python bench/pg_failing_share.py 8000 msg:0
batch:0 msg:0.005 batch:0.005`` (``--reset`` for the second pass)
(each case ``handler:share``). With ``PYTHONPATH`` set to another checkout's ``src``
it measures that code (this checkout's harness still starts the servers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import psycopg

from harness import PostgresServer, publish_n
from oncestream import (
    ConnectOptions,
    Message,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    connect,
)
from oncestream.server import NatsServer
from oncestream.streams import ResetTarget, StreamSpec, ensure_stream, reset_consumer

COLUMNS = "(key, proc, wall, mono)"


def failing(key: bytes, share: float) -> bool:
    """Whether ``key`` is refused (the same keys in every run)."""
    return share > 0 and zlib.crc32(key) % 10_000 < share * 10_000


def transactions(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def case(
    nats_url: str,
    pg: PostgresServer,
    name: str,
    n: int,
    kind: str,
    share: float,
    *,
    pinned: bool,
    reset: bool,
) -> list[dict[str, Any]]:
    url = pg.url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(pg.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE effects (key text, proc text, wall float8, mono float8)")
    stream = name.upper()
    conn = await connect(ConnectOptions(servers=(nats_url,)))
    await ensure_stream(conn, StreamSpec(name=stream, subjects=(f"{name}.>",)))
    await publish_n(conn, f"{name}.x", n, data=lambda i: b"key-%d" % i)
    refused = sum(failing(b"key-%d" % i, share) for i in range(n))

    def rows(msgs: list[Message]) -> list[tuple[str, str, float, float]]:
        out = []
        for msg in msgs:
            if failing(msg.data, share):
                raise ValueError(f"refused {msg.data!r}")
            out.append((msg.data.decode(), "p", time.time(), time.monotonic()))
        return out

    def handler(msg: Message, tx: Any) -> None:
        for row in rows([msg]):
            tx.execute(f"INSERT INTO effects {COLUMNS} VALUES (%s, %s, %s, %s)", row)

    def batch_handler(msgs: list[Message], tx: Any) -> None:
        found = rows(msgs)
        with tx.connection.cursor().copy(f"COPY effects {COLUMNS} FROM STDIN") as copy:
            for row in found:
                copy.write_row(row)

    changes: dict[str, Any] = {}
    if share:
        changes |= {"dead_letter_stream": "DLQ" + stream, "backoff": (0.5, 1.0)}
    if pinned:
        changes |= {"priority_group": "bench", "policy": "pinned"}
    handlers: dict[str, Any] = (
        {"batch_handler": batch_handler} if kind == "batch" else {"handler": handler}
    )
    processor = Processor(
        conn,
        stream,
        "pg",
        ledger=PostgresLedger(url),
        options=ProcessorOptions(**changes),
        **handlers,
    )
    stats = processor.stats
    results: list[dict[str, Any]] = []

    async def measure(phase: str, done: Any) -> None:
        before = transactions(url)
        counts = (stats.applied + stats.suppressed, stats.batches, stats.failed)
        began = time.monotonic()
        await processor.wait_until(done, timeout=600)
        took = time.monotonic() - began
        after = transactions(url)
        handled = stats.applied + stats.suppressed - counts[0]
        batches = stats.batches - counts[1]
        results.append(
            {
                "phase": phase,
                "handler": kind,
                "share": share,
                "pinned": pinned,
                "messages": n,
                "refused": refused,
                "apply_s": round(took, 2),
                "apply_rate": round((n - refused) / took, 1),
                "batches": batches,
                "per_batch": round(handled / max(1, batches), 1),
                "failed": stats.failed - counts[2],
                "commits": after[0] - before[0],
                "rollbacks": after[1] - before[1],
            }
        )

    task = asyncio.create_task(processor.run())
    try:
        await measure("first", lambda s: s.applied >= n - refused)
        if reset:
            await reset_consumer(conn, stream, "pg", ResetTarget(seq=1))
            await measure("after reset", lambda s: s.suppressed >= n - refused)
    finally:
        await processor.stop()
        await task
        await conn.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("messages", type=lambda v: int(float(v)))
    parser.add_argument("cases", nargs="+", help="handler:share, handler msg or batch")
    parser.add_argument("--unpinned", action="store_true", help="no priority group")
    parser.add_argument("--reset", action="store_true", help="then a reset to sequence 1")
    args = parser.parse_args()
    cases = []
    for spec in args.cases:
        kind, _, share = spec.partition(":")
        if kind not in ("msg", "batch"):
            parser.error(f"case {spec!r}: the handler is msg or batch")
        cases.append((kind, float(share or 0)))
    pg = PostgresServer(fsync=True).start()
    try:
        with NatsServer() as server:
            for index, (kind, share) in enumerate(cases):
                results = await case(
                    server.url,
                    pg,
                    f"c{index}",
                    args.messages,
                    kind,
                    share,
                    pinned=not args.unpinned,
                    reset=args.reset,
                )
                for result in results:
                    print(json.dumps(result), flush=True)
    finally:
        pg.stop()


if __name__ == "__main__":
    asyncio.run(main())
