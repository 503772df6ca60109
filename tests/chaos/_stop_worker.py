"""Subprocess worker for the stop tests: a Processor stopped again and again mid ledger call.

Usage: python -m tests.chaos._stop_worker URL DB STREAM CONSUMER ROUNDS SEED

DB is an SQLite file or a ``postgresql://`` URL. Each round starts a Processor on
the same connection and ledger (pruning every 10 ms, so its prune loop keeps the
ledger's thread busy with registry reads, ack-floor writes and prunes; on
PostgreSQL every batch runs there too), lets it run a random few milliseconds and
stops it: even rounds by a real SIGTERM to this process (handled as the CLI does,
``request_stop``), odd rounds by ``await processor.stop()``. After the rounds a
last Processor applies what is left; ``CAUGHT-UP`` is printed and the parent's
SIGTERM ends it (exit 0).

The ledger is instrumented: every ledger call that may run off the event loop's
thread (and the handler) counts itself in flight while it runs, and ``close()``
reports a close that happened while one ran on another thread (``CLOSED-IN-FLIGHT``,
exit 3): the race that crashed the interpreter (SIGSEGV) when sqlite3 or libpq was
inside that call. Each call also holds the thread 1 ms inside its database work, to
widen the window the stops aim at.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from typing import Any

from oncestream import (
    ConnectOptions,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)
from oncestream.ledger import Ledger, LedgerTx

_inflight: dict[int, str] = {}
_lock = threading.Lock()
violations: list[str] = []


class _InFlight:
    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        with _lock:
            _inflight[threading.get_ident()] = self.what

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _inflight.pop(threading.get_ident(), None)


def _closing() -> None:
    me = threading.get_ident()
    with _lock:
        others = [what for ident, what in _inflight.items() if ident != me]
    if others:
        violations.append(", ".join(others))
        print(f"CLOSED-IN-FLIGHT {others}", flush=True)


def _instrumented(base: type[Ledger]) -> type[Ledger]:
    class Instrumented(base):  # type: ignore[valid-type,misc]
        def close(self) -> None:
            _closing()
            super().close()

        def registrations(self, stream: str) -> Any:
            with _InFlight("registrations"):
                time.sleep(0.001)
                return super().registrations(stream)

        def record_floors(self, stream: str, floors: dict[str, int]) -> None:
            with _InFlight("record_floors"):
                time.sleep(0.001)
                super().record_floors(stream, floors)

        def prune(self, *args: Any, **kwargs: Any) -> int:
            with _InFlight("prune"):
                time.sleep(0.001)
                return int(super().prune(*args, **kwargs))

        def begin(self) -> LedgerTx:
            with _InFlight("begin"):
                return super().begin()  # type: ignore[no-any-return]

    return Instrumented


def handler(msg: Any, tx: LedgerTx) -> None:
    with _InFlight("handler"):
        mark = "?" if isinstance(tx.connection, sqlite3.Connection) else "%s"
        tx.execute(f"INSERT INTO effects (id) VALUES ({mark})", (int(msg.data),))


def _ledger(db: str) -> Ledger:
    if db.startswith("postgresql://"):
        ledger: Ledger = _instrumented(PostgresLedger)(db)
        ledger.open()
        con = ledger.connection  # type: ignore[attr-defined]
        con.execute("CREATE TABLE IF NOT EXISTS effects (id BIGINT NOT NULL)")
        con.commit()
    else:
        ledger = _instrumented(SQLiteLedger)(db)
        ledger.open()
        ledger.connection.execute(  # type: ignore[attr-defined]
            "CREATE TABLE IF NOT EXISTS effects (id INTEGER NOT NULL)"
        )
    ledger.close()
    return ledger


async def main(url: str, db: str, stream: str, consumer: str, rounds: str, seed: str) -> None:
    rng = random.Random(int(seed))
    ledger = _ledger(db)
    conn = await connect(ConnectOptions(servers=(url,), reconnect_wait=0.1))
    options = ProcessorOptions(batch=20, ack_wait=5.0, expires=5.0, prune_interval=0.1)
    # Pruning every 10 ms, below what users may set (0.1 s), keeps the ledger's thread busy
    # at every stop without making each round last longer.
    object.__setattr__(options, "prune_interval", 0.01)
    loop = asyncio.get_running_loop()
    current: list[Processor] = []
    loop.add_signal_handler(signal.SIGTERM, lambda: current and current[-1].request_stop())
    applied = 0
    for index in range(int(rounds)):
        processor = Processor(conn, stream, consumer, handler, ledger=ledger, options=options)
        current.append(processor)
        task = asyncio.create_task(processor.run())
        await processor.wait_running(timeout=20)
        await asyncio.sleep(rng.uniform(0.0, 0.02))  # where the stop lands is what varies
        if index % 2 == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            await processor.stop()
        stats = await task
        applied += stats.applied
        current.clear()
    print(f"ROUNDS {rounds} applied {applied}", flush=True)
    last = Processor(conn, stream, consumer, handler, ledger=ledger, options=options)
    current.append(last)
    task = asyncio.create_task(last.run())
    await last.wait_caught_up(timeout=120)
    print("CAUGHT-UP", flush=True)
    await task  # until the parent's SIGTERM
    await conn.close()
    print(f"DONE violations={len(violations)}", flush=True)
    if violations:
        sys.exit(3)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
