"""One member of the group-scale bench (bench/group_scale.py): a GroupMember, SQLite per partition.

Usage: python bench/_group_member.py URL FOLDER NAME STREAM GROUP HANDLER BATCH
HANDLER is ``message`` (``INSERT`` per message, bench_process.insert_row) or
``batch`` (one ``executemany`` per transaction, bench_process.insert_rows). Prints
``READY`` once joined; stops on SIGTERM. With GROUP_MEMBER_PROFILE=PREFIX the member
runs under cProfile and writes PREFIX-NAME-HANDLER.prof when it stops. GROUP_MEMBER_OPTIONS
(JSON) adds ProcessorOptions fields (``{"ack_policy": "all"}``); GROUP_MEMBER_RUNS_ONE_BY_ONE=1
binds a claim's runs one by one, as before ``json_each`` claims (an A/B of that change);
with GROUP_MEMBER_STATS=FILE
the member writes its Processors' batch and pull counts there (JSON) when it stops.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_process import insert_row, insert_rows

from oncestream import (
    ConnectOptions,
    GroupMember,
    GroupOptions,
    ProcessorOptions,
    SQLiteLedger,
    connect,
)


def _ledger(folder: str):  # type: ignore[no-untyped-def]
    def ledger(partition: int) -> SQLiteLedger:
        path = Path(folder) / f"p{partition}.db"
        with sqlite3.connect(path, timeout=30) as con:
            con.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, body BLOB)")
        ledger = SQLiteLedger(path)
        if os.environ.get("GROUP_MEMBER_RUNS_ONE_BY_ONE"):  # A/B: no json_each claims
            ledger.open()
            ledger.json_each = False
        return ledger

    return ledger


async def main(
    url: str, folder: str, name: str, stream: str, group: str, kind: str, batch: str
) -> None:
    conn = await connect(ConnectOptions(servers=(url,)))
    handlers = {"batch_handler": insert_rows} if kind == "batch" else {"handler": insert_row}
    member = GroupMember(
        conn, stream, group, **handlers, ledger=_ledger(folder),  # type: ignore[arg-type]
        options=GroupOptions(member=name, heartbeat=0.5, member_ttl=2),
        processor_options=ProcessorOptions(
            batch=int(batch), prune_interval=0, pinned_ttl=10,
            **json.loads(os.environ.get("GROUP_MEMBER_OPTIONS") or "{}"),
        ),
    )  # fmt: skip
    batches: dict[int, int] = {}
    member.processor_listeners.append(
        lambda p, started: None if started else batches.__setitem__(
            len(batches), p.stats.batches
        )
    )  # fmt: skip
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, member.request_stop)
    task = asyncio.create_task(member.run())
    await member.wait_running(timeout=30)
    print("READY", flush=True)
    stats = await task
    await conn.close()
    out = os.environ.get("GROUP_MEMBER_STATS")
    if out:
        totals = stats.totals()
        Path(out).write_text(json.dumps({**totals, "batches": sum(batches.values())}))


if __name__ == "__main__":
    prefix = os.environ.get("GROUP_MEMBER_PROFILE")
    if prefix:
        profile = cProfile.Profile()
        profile.runcall(asyncio.run, main(*sys.argv[1:8]))
        profile.dump_stats(f"{prefix}-{sys.argv[3]}-{sys.argv[6]}.prof")
    else:
        asyncio.run(main(*sys.argv[1:8]))
