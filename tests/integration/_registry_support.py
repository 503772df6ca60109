"""Helpers of the ledger-registry tests: processors of stream PR writing ids to SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from oncestream import Processor, ProcessorOptions, SQLiteLedger


def into(table: str) -> Any:
    """A handler inserting each message's id (its data) into ``table``."""

    def handler(msg: Any, tx: Any) -> None:
        tx.execute(f"CREATE TABLE IF NOT EXISTS {table} (id BIGINT NOT NULL)")
        tx.execute(f"INSERT INTO {table} (id) VALUES (?)", (int(msg.data),))

    return handler


def opts(**kw: Any) -> ProcessorOptions:
    return ProcessorOptions(**{"batch": 20, "ack_wait": 5, "expires": 2, **kw})


def processor(conn: Any, path: Path, consumer: str, table: str, **kw: Any) -> Processor:
    """A Processor of consumer ``consumer`` of PR on the SQLite ledger ``path``."""
    return Processor(
        conn, "PR", consumer, into(table), ledger=SQLiteLedger(path), options=opts(**kw)
    )


async def edit_filter(conn: Any, consumer: str, *filters: str) -> None:
    """``CONSUMER.CREATE`` with action update, as ``oncestream consumer edit --filter``."""
    config = dict((await conn.consumer_info("PR", consumer))["config"])
    config.pop("filter_subject", None)
    config.pop("filter_subjects", None)
    if len(filters) == 1:
        config["filter_subject"] = filters[0]
    else:
        config["filter_subjects"] = list(filters)
    await conn.api(
        f"CONSUMER.CREATE.PR.{consumer}",
        {"stream_name": "PR", "config": config, "action": "update"},
    )


async def start_stop(proc: Processor) -> None:
    """Run ``proc`` until it is set up (it registers), then stop it."""
    task = asyncio.create_task(proc.run())
    await proc.wait_running(30)
    await proc.stop()
    await task


def ids(path: Path, table: str) -> set[int]:
    """The ids in ``table`` of the ledger file (none while the table does not exist)."""
    with sqlite3.connect(path) as db:
        names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {r[0] for r in db.execute(f"SELECT id FROM {table}")} if table in names else set()
