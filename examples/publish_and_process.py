"""Publish orders exactly once, then apply them exactly once into SQLite.

Runs on its own embedded nats-server: ``.venv/bin/python examples/publish_and_process.py``.
Every order is published twice (a producer retry); the stream keeps one copy.
The Processor applies each one once to the ``orders`` table through the ledger.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

import orjson

from oncestream import (
    ConnectOptions,
    Processor,
    ProcessorOptions,
    Publisher,
    PublisherOptions,
    SQLiteLedger,
    connect,
)
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream

ORDERS = 10_000


def apply_order(msg, tx) -> None:  # type: ignore[no-untyped-def]
    """The handler: its effect goes through ``tx``, in the ledger's transaction."""
    order = orjson.loads(msg.data)
    tx.execute("INSERT INTO orders (id, amount) VALUES (?, ?)", (order["id"], order["amount"]))


async def main(work: Path) -> None:
    with NatsServer() as server:
        async with await connect(ConnectOptions(servers=(server.url,))) as conn:
            await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",)))

            # ingest="acks": a PubAck per message, so the stats count the duplicates (a
            # fast-ingest batch, the default where the stream allows it, is confirmed whole).
            async with Publisher(conn, PublisherOptions(stream="ORDERS", ingest="acks")) as pub:
                for _attempt in range(2):  # the second pass plays a producer retry
                    for i in range(ORDERS):
                        body = orjson.dumps({"id": f"o-{i}", "amount": i % 97})
                        await pub.publish(f"orders.{i % 4}", body, msg_id=f"o-{i}")
                    await pub.flush()
            print(f"published: {pub.stats}")

            db_path = work / "orders.db"
            with sqlite3.connect(db_path) as db:
                db.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INT)")
            processor = Processor(
                conn,
                "ORDERS",
                "billing",
                apply_order,
                ledger=SQLiteLedger(str(db_path)),
                options=ProcessorOptions(batch=500),
            )
            task = asyncio.create_task(processor.run())
            await processor.wait_until(lambda stats: stats.applied >= ORDERS, timeout=60)
            await processor.stop()
            await task
            with sqlite3.connect(db_path) as db:
                (rows,) = db.execute("SELECT count(*) FROM orders").fetchone()
            print(f"processed: {processor.stats}; table rows: {rows} (expected {ORDERS})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
