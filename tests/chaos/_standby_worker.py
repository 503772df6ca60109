"""Subprocess worker for the active/standby tests: a Processor in a pinned priority group.

Usage: python -m tests.chaos._standby_worker URL DB NAME STREAM CONSUMER PINNED_TTL

DB is an SQLite file or a ``postgresql://`` URL (a PostgreSQL ledger with its default
settings: the handler's statements go out in pipeline mode).
(environment: ``BATCH``, ``ACK_WAIT`` seconds, ``HANDLER_SLEEP`` seconds per message,
``BUSY_TIMEOUT`` the SQLite ledger's busy timeout in seconds, ``FREEZE_AT`` a stream
sequence whose handler call prints ``FROZEN`` and then, inside its batch's transaction,
SIGSTOPs the worker, or with ``FREEZE_FOR`` blocks for that many seconds: a long batch;
``FREEZE_WHERE=end``, on PostgreSQL: that message's insert takes ``END_SLEEP`` seconds on
the server and the worker stops itself while it waits for the batch's results, after its
handlers)

The handler inserts ``(seq, subject, worker, at)`` into ``effects`` in the
shared ledger database (no unique key: a second application would show; the
rowid, on PostgreSQL the ``id`` column, is the order of application across both
workers). Prints ``READY``
once pulling, the Processor's takeover/demotion log lines as they happen
(``oncestream.process`` on stdout), and ``STATS {json}`` on a SIGTERM exit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
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

NAME = ""
INSERT = "INSERT INTO effects (seq, subject, worker, at) VALUES (?, ?, ?, ?)"
#: Seconds per handler call (a slow new active leaves the old one a window to misbehave).
HANDLER_SLEEP = float(os.environ.get("HANDLER_SLEEP", "0"))
#: Freeze while applying this stream sequence, the ledger's write lock held: SIGSTOP
#: itself, or block the event loop for ``FREEZE_FOR`` seconds when that is set.
FREEZE_AT = int(os.environ.get("FREEZE_AT", "0"))
FREEZE_FOR = float(os.environ.get("FREEZE_FOR", "0"))
#: ``handler``: stop inside the handler call; ``end``: once the batch's statements are
#: sent and the worker waits for their results (the insert of ``FREEZE_AT`` sleeps
#: ``END_SLEEP`` seconds on the server, the worker stops a third of it in).
FREEZE_WHERE = os.environ.get("FREEZE_WHERE", "handler")
END_SLEEP = 1.5
SLOW_INSERT = (
    "INSERT INTO effects (seq, subject, worker, at) SELECT %s, %s, %s, %s FROM pg_sleep(%s)"
)


def _stop_later(delay: float) -> None:
    time.sleep(delay)
    print("FROZEN", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def handler(msg: Any, tx: Any) -> None:
    global FREEZE_AT
    row = (msg.seq, msg.subject, NAME, time.time())
    if msg.seq == FREEZE_AT and FREEZE_WHERE == "end":
        FREEZE_AT = 0  # once
        tx.execute(SLOW_INSERT, (*row, END_SLEEP))
        # Sent with the batch's end (a Sync), then waited for: stopped while it waits.
        threading.Thread(target=_stop_later, args=(END_SLEEP / 3,), daemon=True).start()
        return
    tx.execute(
        INSERT if isinstance(tx.connection, sqlite3.Connection) else INSERT.replace("?", "%s"),
        row,
    )
    if HANDLER_SLEEP:
        time.sleep(HANDLER_SLEEP)
    if msg.seq == FREEZE_AT:
        FREEZE_AT = 0  # once
        print("FROZEN", flush=True)
        if FREEZE_FOR:
            time.sleep(FREEZE_FOR)
        else:
            # To this thread (the ledger's): it stops here. A stop sent to the process
            # is taken by the main thread, and this one runs on meanwhile (to the
            # batch's end, even its commit).
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


async def main(url: str, db: str, name: str, stream: str, consumer: str, ttl: str) -> None:
    global NAME
    NAME = name
    handler_log = logging.StreamHandler(sys.stdout)
    handler_log.setFormatter(logging.Formatter("LOG %(message)s"))
    logging.getLogger("oncestream.process").addHandler(handler_log)
    logging.getLogger("oncestream.process").setLevel(logging.WARNING)
    ledger: SQLiteLedger | PostgresLedger
    if db.startswith("postgresql://"):
        ledger = PostgresLedger(db)
        ledger.open()
        ledger.connection.execute(
            "CREATE TABLE IF NOT EXISTS effects (id BIGSERIAL PRIMARY KEY, seq BIGINT NOT NULL,"
            " subject TEXT NOT NULL, worker TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)"
        )
        ledger.connection.commit()
    else:
        ledger = SQLiteLedger(db, busy_timeout=float(os.environ.get("BUSY_TIMEOUT", "30")))
        ledger.open()
        ledger.connection.execute(
            "CREATE TABLE IF NOT EXISTS effects (seq INTEGER NOT NULL, subject TEXT NOT NULL, "
            "worker TEXT NOT NULL, at REAL NOT NULL)"
        )
    conn = await connect(ConnectOptions(servers=(url,), reconnect_wait=0.1))
    options = ProcessorOptions(
        batch=int(os.environ.get("BATCH", "50")),
        # longer than the takeover: only the reset can bring held messages back
        ack_wait=float(os.environ.get("ACK_WAIT", "30")),
        prune_interval=0,
        priority_group="main",
        pinned_ttl=float(ttl),
    )
    processor = Processor(conn, stream, consumer, handler, ledger=ledger, options=options)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, processor.request_stop)
    task = asyncio.create_task(processor.run())
    await processor.wait_running(timeout=20)
    print("READY", flush=True)
    stats = await task
    print("STATS " + json.dumps(stats.as_dict()), flush=True)
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
