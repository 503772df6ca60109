"""Handler functions used by the processor tests (importable as ``tests.handlers:name``)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def _mark(tx: Any) -> str:
    return "?" if isinstance(tx.connection, sqlite3.Connection) else "%s"


def record(msg: Any, tx: Any) -> None:
    """Insert the message body as an integer into ``effects`` (no unique key: duplicates show)."""
    tx.execute("CREATE TABLE IF NOT EXISTS effects (id BIGINT NOT NULL)")
    tx.execute(f"INSERT INTO effects (id) VALUES ({_mark(tx)})", (int(msg.data),))


def always_fails(msg: Any, tx: Any) -> None:
    """A handler that never succeeds."""
    raise RuntimeError(f"cannot handle {msg.data!r}")


def record_unless_7(msg: Any, tx: Any) -> None:
    """Like :func:`record`, but fails for every multiple of 7."""
    if int(msg.data) % 7 == 0:
        raise ValueError(f"refusing {int(msg.data)}")
    record(msg, tx)


def record_many(msgs: Any, tx: Any) -> None:
    """A batch handler: :func:`record` for a whole transaction in one ``executemany``."""
    tx.execute("CREATE TABLE IF NOT EXISTS effects (id BIGINT NOT NULL)")
    tx.executemany(f"INSERT INTO effects (id) VALUES ({_mark(tx)})", [(int(m.data),) for m in msgs])


def slow_record(msg: Any, tx: Any) -> None:
    """:func:`record`, 20 ms per message (a consumer that is still busy for a while)."""
    time.sleep(0.02)
    record(msg, tx)


def record_unless_broken(broken: set[int]) -> Any:
    """Like :func:`record`, but fails for the ids in ``broken`` while they are there (a
    handler fixed by emptying the set)."""

    def handle(msg: Any, tx: Any) -> None:
        if int(msg.data) in broken:
            raise ValueError(f"refusing {int(msg.data)}")
        record(msg, tx)

    return handle
