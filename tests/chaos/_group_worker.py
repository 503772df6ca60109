"""Subprocess worker for the group chaos tests: one GroupMember over a partitioned stream.

Usage: python -m tests.chaos._group_worker URL LEDGER NAME STREAM GROUP PINNED_TTL

LEDGER is a ledger URL: ``sqlite:////abs/dir/svc-{partition}.db`` (a file per
partition) or one ``postgresql://`` URL shared by every partition. The handler
inserts ``(seq, subject, member, at)`` into ``effects`` in the partition's ledger
database (no unique key: a second application would show; SQLite's rowid and
PostgreSQL's serial id are the order of application).

Environment: ``BATCH``; ``HEARTBEAT`` and ``MEMBER_TTL`` (seconds); ``HANDLER_SLEEP``
seconds per message; ``BUSY_TIMEOUT`` (the SQLite ledgers' busy timeout);
``FREEZE_AFTER=N``: inside the transaction of the batch that applies this member's
N-th message, print ``FROZEN`` and SIGSTOP itself (the ledger's locks held);
``ACK_POLICY`` (``explicit``, the default, or ``all``: one ack per batch);
``SABOTAGE`` (the negative controls, test code only): ``no-fence`` (a takeover writes
no owner and batches check none) or ``no-reset`` (no reset of the consumer to its ack
floor: neither a takeover's nor, with ack policy ``all``, one after a gap); ``STATIC=I/N``
(a static member, no membership bucket);
``GATE``: ``after:N`` (once the handler has applied N messages) or ``takeover`` (once
this member has taken a partition over): the next batch, its messages fetched and its
transaction not begun yet, prints ``GATED`` and SIGSTOPs the process (the test
resumes it with SIGCONT), or with ``HOLD_FILE`` set waits (on the ledger's thread: the
member keeps pulling and keeps its pins) until that file exists; ``ARMED`` is printed
when ``after:N`` arms the gate.

Prints ``READY`` once joined, the group's and Processors' log lines (``LOG ...``),
``STATS {json}`` on a SIGTERM exit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import sys
import time
from typing import Any

from oncestream import ConnectOptions, GroupMember, GroupOptions, ProcessorOptions, connect
from oncestream.ledger import Ledger, PostgresLedger, SQLiteLedger, ledger_from_url

NAME = ""
HANDLER_SLEEP = float(os.environ.get("HANDLER_SLEEP", "0"))
FREEZE_AFTER = int(os.environ.get("FREEZE_AFTER", "0"))
_applied = 0


def handler(msg: Any, tx: Any) -> None:
    global _applied, FREEZE_AFTER
    mark = "?" if isinstance(tx.connection, sqlite3.Connection) else "%s"
    tx.execute(
        f"INSERT INTO effects (seq, subject, member, at) VALUES ({mark}, {mark}, {mark}, {mark})",
        (msg.seq, msg.subject, NAME, time.time()),
    )
    if HANDLER_SLEEP:
        time.sleep(HANDLER_SLEEP)
    _applied += 1
    if GATE.startswith("after:") and _applied >= int(GATE[6:]):
        _arm()
    if FREEZE_AFTER and _applied >= FREEZE_AFTER:
        FREEZE_AFTER = 0  # once
        print("FROZEN", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


GATE = os.environ.get("GATE", "")
_gate_armed = False


def _arm() -> None:
    global _gate_armed
    if not _gate_armed:
        _gate_armed = True
        print("ARMED", flush=True)


HOLD_FILE = os.environ.get("HOLD_FILE", "")


def _at_begin() -> None:
    """Called when a batch transaction is about to begin: freeze or hold here once armed."""
    global _gate_armed, GATE
    if not _gate_armed:
        return
    _gate_armed, GATE = False, ""  # once
    print("GATED", flush=True)
    if not HOLD_FILE:
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(HOLD_FILE) and time.monotonic() < deadline:
        time.sleep(0.02)  # a file the test creates: no event crosses processes


class _ArmOnTakeover(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if GATE == "takeover" and "is now the active one" in record.getMessage():
            _arm()


class _GatedSQLite(SQLiteLedger):
    def begin_nowait(self) -> Any:
        if _gate_armed and HOLD_FILE:
            return None  # as if locked: begin() then runs on the ledger's thread
        _at_begin()
        return super().begin_nowait()

    def begin(self) -> Any:
        _at_begin()
        return super().begin()


class _GatedPostgres(PostgresLedger):
    def begin(self) -> Any:
        _at_begin()
        return super().begin()


def _sabotage(mode: str) -> None:
    """Switch the fence or the reset off where a pinned consumer's takeover runs them
    (process/_pinning: PinnedGroup calls its module's take_over, reset_to_ack_floor and
    OwnerCheck)."""
    from oncestream.process import _ackall, _pinning

    modules = [_pinning, _ackall]
    if mode == "no-fence":

        def no_take_over(*_args: Any, **_kwargs: Any) -> None:
            return None

        for module in modules:
            if hasattr(module, "take_over"):
                module.take_over = no_take_over  # type: ignore[attr-defined]
        _pinning.OwnerCheck.__call__ = lambda self, tx: None  # type: ignore[method-assign]
    elif mode == "no-reset":

        async def no_reset(*_args: Any, **_kwargs: Any) -> int:
            return 0

        for module in modules:
            if hasattr(module, "reset_to_ack_floor"):
                module.reset_to_ack_floor = no_reset  # type: ignore[attr-defined]
    elif mode:
        raise SystemExit(f"unknown SABOTAGE {mode!r}")


def _ledgers(url: str):  # type: ignore[no-untyped-def]
    busy = float(os.environ.get("BUSY_TIMEOUT", "30"))

    def ledger(partition: int) -> Ledger:
        if url.startswith("postgresql"):
            return _GatedPostgres(url)
        found = ledger_from_url(url.replace("{partition}", str(partition)))
        assert isinstance(found, SQLiteLedger)
        path = found.path
        with sqlite3.connect(path, timeout=30) as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS effects (seq INTEGER NOT NULL, subject TEXT NOT "
                "NULL, member TEXT NOT NULL, at REAL NOT NULL)"
            )
        return _GatedSQLite(path, busy_timeout=busy)

    return ledger


async def main(url: str, ledger: str, name: str, stream: str, group: str, ttl: str) -> None:
    global NAME
    NAME = name
    _sabotage(os.environ.get("SABOTAGE", ""))
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(logging.Formatter("LOG %(created).6f %(name)s %(message)s"))
    for logger in ("oncestream.process",):
        logging.getLogger(logger).addHandler(out)
        logging.getLogger(logger).setLevel(logging.INFO)
        logging.getLogger(logger).addHandler(_ArmOnTakeover())
    static = os.environ.get("STATIC", "")
    conn = await connect(ConnectOptions(servers=(url,), reconnect_wait=0.1))
    member = GroupMember(
        conn,
        stream,
        group,
        handler,
        ledger=_ledgers(ledger),
        options=GroupOptions(
            member=name,
            heartbeat=float(os.environ.get("HEARTBEAT", "0.5")),
            member_ttl=float(os.environ.get("MEMBER_TTL", "2")),
            static=(int(static.split("/")[0]), int(static.split("/")[1])) if static else None,
        ),
        processor_options=ProcessorOptions(
            batch=int(os.environ.get("BATCH", "50")),
            ack_wait=30.0,  # longer than a move: only the reset brings held messages back
            prune_interval=0,
            pinned_ttl=float(ttl),
            ack_policy=os.environ.get("ACK_POLICY", "explicit"),
        ),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, member.request_stop)
    task = asyncio.create_task(member.run())
    await member.wait_running(timeout=20)
    print("READY", flush=True)
    stats = await task
    print("STATS " + json.dumps(stats.status()), flush=True)
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
