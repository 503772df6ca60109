"""Subprocess worker for the Processor kill tests.

Usage: python -m tests.chaos._processor_worker URL DB STREAM CONSUMER

DB is an SQLite file, or a ``postgresql://`` URL (a PostgreSQL ledger; the
handler's statements then go out in pipeline mode). The handler inserts the
message's id into ``effects`` (no unique constraint, so a duplicate application
would show). ``CRASH_AT`` (``before_commit``, ``mid_batch``, ``after_commit``, ``during_ack``)
with ``CRASH_AFTER`` (a batch count) makes the worker SIGKILL itself at that
deterministic point. ``ACK_POLICY=all`` runs it with one ack per batch (the
consumer is created so). Prints ``READY`` once pulling and ``STATS {json}`` on a
clean SIGTERM exit. ``BATCH`` and ``ACK_WAIT`` (seconds) set the
Processor's options.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Sequence

from oncestream import (
    ConnectOptions,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from oncestream.ledger import LedgerTx
from oncestream.process._acking import Acknowledger
from oncestream.process._applying import Applier

CRASH_AT = os.environ.get("CRASH_AT", "")
CRASH_AFTER = int(os.environ.get("CRASH_AFTER", "0") or 0)
HANDLER_SLEEP = float(os.environ.get("HANDLER_SLEEP", "0"))
_batches = 0


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def handler(msg, tx: LedgerTx) -> None:  # type: ignore[no-untyped-def]
    mark = "?" if isinstance(tx.connection, sqlite3.Connection) else "%s"
    tx.execute(f"INSERT INTO effects (id) VALUES ({mark})", (int(msg.data),))
    if HANDLER_SLEEP:
        time.sleep(HANDLER_SLEEP)


class CrashingApplier(Applier):
    """Crash hook inside the ledger transaction (applying side)."""

    def _run_batch(self, entries: Sequence, msgs: Sequence, **kw):  # type: ignore[no-untyped-def,type-arg]
        global _batches
        _batches += 1
        if CRASH_AT in ("before_commit", "mid_batch") and _batches >= CRASH_AFTER:
            original = self.handler
            last = msgs[-1] if CRASH_AT == "before_commit" else msgs[len(msgs) // 2]

            def crash_after_effects(msg, tx):  # type: ignore[no-untyped-def]
                original(msg, tx)
                if msg is last:
                    _die()  # effects written (or in flight), transaction not committed

            self.handler = crash_after_effects
        return super()._run_batch(entries, msgs, **kw)


class CrashingAcknowledger(Acknowledger):
    """Crash hooks between the commit and the acks (acknowledging side)."""

    async def ack(self, replies: list[str]) -> None:
        if CRASH_AT == "after_commit" and _batches >= CRASH_AFTER:
            _die()  # committed, nothing acked
        if CRASH_AT == "during_ack" and _batches >= CRASH_AFTER:
            half = replies[: len(replies) // 2]
            await self.send(half, b"+ACK")
            assert self.conn is not None
            await self.conn.nc.flush()
            _die()  # half of the batch acked
        await super().ack(replies)

    async def ack_through(self, reply: str) -> None:
        if CRASH_AT == "after_commit" and _batches >= CRASH_AFTER:
            _die()  # committed, nothing acked
        if CRASH_AT == "during_ack" and _batches >= CRASH_AFTER:
            await self.send([reply], b"+ACK")  # the batch's one ack sent, not confirmed
            assert self.conn is not None
            await self.conn.nc.flush()
            _die()
        await super().ack_through(reply)


class CrashingProcessor(Processor):
    """A Processor whose applying and acknowledging parts have the crash hooks."""

    _acknowledger_type = CrashingAcknowledger
    _applier_type = CrashingApplier


async def main(url: str, db: str, stream: str, consumer: str) -> None:
    ledger: SQLiteLedger | PostgresLedger
    if db.startswith("postgresql://"):
        ledger = PostgresLedger(db)
        ledger.open()
        ledger.connection.execute("CREATE TABLE IF NOT EXISTS effects (id BIGINT NOT NULL)")
        ledger.connection.commit()
    else:
        ledger = SQLiteLedger(db)
        ledger.open()
        ledger.connection.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER NOT NULL)")
    conn = await connect(ConnectOptions(servers=(url,), reconnect_wait=0.1))
    options = ProcessorOptions(
        batch=int(os.environ.get("BATCH", "100")),
        ack_wait=float(os.environ.get("ACK_WAIT", "2")),
        expires=5.0,
        prune_interval=0,
        ack_policy=os.environ.get("ACK_POLICY", "explicit"),
    )
    processor = CrashingProcessor(conn, stream, consumer, handler, ledger=ledger, options=options)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, processor.request_stop)
    task = asyncio.create_task(processor.run())
    await processor.wait_running(timeout=20)
    print("READY", flush=True)
    stats = await task
    print("STATS " + json.dumps(stats.as_dict()), flush=True)
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
