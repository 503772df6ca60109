"""Worker processes of a trial (each is SIGKILLed / SIGSTOPped by the nemesis).

Usage: ``python -m torture.workers ROLE CONFIG_JSON``

Roles: ``publisher`` (:class:`oncestream.Publisher`), ``session``
(:class:`oncestream.ProducerSession`), ``processor`` (:class:`oncestream.Processor`
on a SQLite or PostgreSQL ledger). Every acknowledged publish is appended to the
worker's history file (one JSON line, written with one ``write`` on an
``O_APPEND`` descriptor, so a SIGKILL never leaves half a line). A restarted
producer resumes from its own history: keys without a recorded ack are sent
again with the same msg id (the stream's duplicate window or the session's
sequence check keeps them single).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from oncestream import (
    ConnectOptions,
    OncestreamError,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    ProducerSession,
    Publisher,
    PublisherOptions,
    SQLiteLedger,
    connect,
)

#: The effects table: no unique constraint, so an effect applied twice shows as two rows.
EFFECTS = "effects"
EFFECTS_COLUMNS = "(key TEXT NOT NULL, proc TEXT, wall REAL, mono REAL)"


class History:
    """Append-only JSONL history of one process."""

    def __init__(self, path: str, process: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.process = process

    def write(self, op: str, key: str, result: str, **extra: Any) -> None:
        line = {
            "wall": time.time(),
            "mono": time.monotonic(),
            "process": self.process,
            "op": op,
            "key": key,
            "result": result,
            **extra,
        }
        os.write(self.fd, (json.dumps(line) + "\n").encode())


def acked_keys(path: str) -> set[str]:
    """Keys with an ``ack`` line in a history file."""
    keys: set[str] = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if line.get("op") == "ack":
                    keys.add(line["key"])
    return keys


def _connect_options(cfg: dict[str, Any]) -> ConnectOptions:
    return ConnectOptions(
        servers=tuple(cfg["servers"]),
        domain=cfg.get("domain"),
        reconnect_wait=0.2,
        max_reconnect_attempts=-1,
        connect_timeout=2.0,
        request_timeout=3.0,
        name=cfg["name"],
    )


async def _paced(rate: float, i: int, t0: float) -> None:
    """Wait until record ``i`` is due: ``t0`` is the trial's start (wall clock), so a
    restarted producer catches up with the schedule instead of starting it again."""
    due = t0 + i / rate
    delay = due - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


async def run_publisher(cfg: dict[str, Any]) -> None:
    name, count, rate = cfg["name"], int(cfg["count"]), float(cfg["rate"])
    history = History(cfg["history"], name)
    done = acked_keys(cfg["history"])
    conn = await connect(_connect_options(cfg))
    pub = Publisher(
        conn,
        PublisherOptions(
            stream=cfg["stream"],
            max_inflight=256,
            ack_timeout=2.0,
            max_attempts=30,
            retry_backoff=(0.1, 0.5, 1.0),
        ),
    )
    await pub.start()
    subject = f"{cfg['subject']}.{name}"
    t0 = float(cfg.get("t0", time.time()))
    pending: set[asyncio.Future[Any]] = set()
    for i in range(count):
        key = f"{name}-{i}"
        if key in done:
            continue
        sent = time.monotonic()
        fut = await pub.publish(subject, key.encode(), msg_id=key)

        def on_ack(f: asyncio.Future[Any], key: str = key, sent: float = sent) -> None:
            pending.discard(f)
            if f.cancelled() or f.exception() is not None:
                history.write("fail", key, type(f.exception()).__name__)
                return
            ack = f.result()
            history.write(
                "ack",
                key,
                "ok",
                seq=ack.seq,
                dup=bool(ack.duplicate),
                latency=time.monotonic() - sent,
            )

        fut.add_done_callback(on_ack)
        pending.add(fut)
        await _paced(rate, i, t0)
    if pending:
        await asyncio.wait(pending, timeout=120)
    await pub.close()
    await conn.close()


async def run_session(cfg: dict[str, Any]) -> None:
    name, count, rate = cfg["name"], int(cfg["count"]), float(cfg["rate"])
    history = History(cfg["history"], name)
    conn = await connect(_connect_options(cfg))
    session = ProducerSession(
        conn,
        stream=cfg["stream"],
        subject_prefix=cfg["subject"],
        producer_id=name,
        options=PublisherOptions(ack_timeout=2.0, max_attempts=30, retry_backoff=(0.1, 0.5, 1.0)),
    )
    resume = await session.start()
    t0 = float(cfg.get("t0", time.time()))
    first = 0 if resume is None else resume + 1
    for i in range(first, count):
        sent = time.monotonic()
        ack = await session.publish(i, f"{name}-{i}".encode())
        if ack is not None:
            history.write(
                "ack",
                f"{name}-{i}",
                "ok",
                seq=ack.seq,
                dup=bool(ack.duplicate),
                latency=time.monotonic() - sent,
            )
        await _paced(rate, i, t0)
    await session.close()
    await conn.close()


async def run_processor(cfg: dict[str, Any]) -> None:
    name, table = cfg["name"], cfg["table"]
    ledger: SQLiteLedger | PostgresLedger
    if cfg["ledger"].startswith("postgresql://"):
        ledger = PostgresLedger(cfg["ledger"])
        ph = "%s"
    else:
        ledger = SQLiteLedger(cfg["ledger"])
        ph = "?"
    ledger.open()
    with ledger.transaction() as tx:
        tx.execute(f"CREATE TABLE IF NOT EXISTS {table} {EFFECTS_COLUMNS}")
    insert = f"INSERT INTO {table} (key, proc, wall, mono) VALUES ({ph}, {ph}, {ph}, {ph})"

    def handler(msg: Any, tx: Any) -> None:
        text = bytes(msg.data).decode()
        key = str(json.loads(text)["id"]) if text.startswith("{") else text
        tx.execute(insert, (key, name, time.time(), time.monotonic()))

    conn = await connect(_connect_options(cfg))
    options = ProcessorOptions(
        batch=100, ack_wait=3.0, expires=2.0, max_deliver=1000, backoff=(0.2,), prune_interval=0
    )
    processor = Processor(
        conn, cfg["stream"], cfg["consumer"], handler, ledger=ledger, options=options
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, processor.request_stop)
    await processor.run()
    await conn.close()


ROLES = {"publisher": run_publisher, "session": run_session, "processor": run_processor}


def main() -> int:
    role, raw = sys.argv[1], sys.argv[2]
    cfg = json.loads(raw)
    try:
        asyncio.run(ROLES[role](cfg))
    except OncestreamError as exc:
        print(f"{role} {cfg.get('name')}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
