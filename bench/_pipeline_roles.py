"""The producer and the Processor of bench/bench_pipeline.py, each in its own process.

``producer``: the demo's producer (Publisher, order ids as msg ids) at full speed or at
``--rate``; prints ``PRODUCER-JSON`` with its wall-clock start and end.

``processor``: a Processor on the enriched stream with an SQLite ledger
(synchronous=FULL); the handler inserts each order into ``orders_out``. The
ledger's commit is timed: latency = commit time - the order's ``ts`` (taken
when the order is generated, just before it is published). Prints ``WARM-DONE``
once the warm-up orders are committed, then ``PROCESSOR-JSON``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oncestream import ConnectOptions, Processor, ProcessorOptions, SQLiteLedger, connect
from oncestream.demo._internal import Expected, produce
from oncestream.ledger import LedgerTx

WARM_PREFIX = "warm-"


class TimedLedger(SQLiteLedger):
    """SQLiteLedger recording, per committed transaction, when it committed and what it held."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.latencies: list[float] = []
        self.commits: list[tuple[float, int]] = []  # (wall time, measured orders so far)
        self.warm = 0

    def begin(self) -> LedgerTx:
        tx = super().begin()
        sent: list[float] = []
        warm = [0]
        original = tx.commit

        def commit() -> None:
            original()
            now = time.time()
            self.latencies.extend(now - t for t in sent)
            self.warm += warm[0]
            if sent:
                self.commits.append((now, len(self.latencies)))

        tx.bench_sent = sent  # type: ignore[attr-defined]
        tx.bench_warm = warm  # type: ignore[attr-defined]
        tx.commit = commit  # type: ignore[method-assign]
        return tx


def handle(msg: Any, tx: Any) -> None:
    order = orjson.loads(msg.data)
    tx.execute(
        "INSERT INTO orders_out (order_id, region, amount, band, ts, source_seq)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            order["order_id"],
            order["region"],
            order["amount"],
            order["band"],
            order["ts"],
            order["source_seq"],
        ),
    )
    if order["order_id"].startswith(WARM_PREFIX):
        tx.bench_warm[0] += 1
    else:
        tx.bench_sent.append(order["ts"] / 1000.0)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def processor(args: argparse.Namespace) -> dict[str, Any]:
    ledger = TimedLedger(Path(args.db))
    ledger.open()
    ledger.connection.execute(
        "CREATE TABLE orders_out (order_id TEXT, region TEXT, amount TEXT, band TEXT,"
        " ts INTEGER, source_seq INTEGER)"
    )
    async with await connect(ConnectOptions(servers=(args.url,))) as conn:
        proc = Processor(
            conn,
            args.stream,
            "pipeline",
            handle,
            ledger=ledger,
            options=ProcessorOptions(batch=args.batch, prune_interval=0),
        )
        task = asyncio.create_task(proc.run())
        await proc.wait_until(lambda s: ledger.warm >= args.warm, timeout=args.timeout)
        print("WARM-DONE", flush=True)
        await proc.wait_until(
            lambda s: len(ledger.latencies) >= args.expected, timeout=args.timeout
        )
        await proc.stop()
        await task
        stats = proc.stats
    lat = ledger.latencies
    commits = ledger.commits

    def at(fraction: float) -> float:
        target = fraction * len(lat)
        return next(t for t, count in commits if count >= target)

    t10, t90 = at(0.1), at(0.9)
    return {
        "committed": len(lat),
        "first_commit": commits[0][0],
        "last_commit": commits[-1][0],
        "sustained_10_90": 0.8 * len(lat) / max(t90 - t10, 1e-9),
        "latency_ms": {
            "p50": round(_percentile(lat, 0.5) * 1000, 1),
            "p99": round(_percentile(lat, 0.99) * 1000, 1),
            "max": round(max(lat) * 1000, 1),
        },
        "applied": stats.applied,
        "suppressed": stats.suppressed,
        "batch": args.batch,
    }


async def producer(args: argparse.Namespace) -> dict[str, Any]:
    start = time.time()
    report = await produce(
        ConnectOptions(servers=(args.url,)),
        args.stream,
        args.n,
        Expected(),
        duplicate_every=50 if args.faults else 1 << 62,
        restart_at=0.6 if args.faults else 2.0,
        rate=args.rate or None,
    )
    return {"start": start, "end": time.time(), "sent": report.sent, "orders": report.orders}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("producer", "processor"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--n", type=int, default=0, help="producer: orders")
    parser.add_argument("--rate", type=float, default=0.0, help="producer: orders/s (0 = max)")
    parser.add_argument("--faults", action="store_true", help="producer: the demo's re-sends")
    parser.add_argument("--db", help="processor: SQLite file")
    parser.add_argument("--warm", type=int, default=0, help="processor: warm-up orders")
    parser.add_argument("--expected", type=int, default=0, help="processor: measured orders")
    parser.add_argument("--batch", type=int, default=500, help="processor: batch")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    if args.role == "producer":
        print("PRODUCER-JSON " + json.dumps(asyncio.run(producer(args))), flush=True)
    else:
        print("PROCESSOR-JSON " + json.dumps(asyncio.run(processor(args))), flush=True)


if __name__ == "__main__":
    main()
