"""Helpers only tests use: counting the effects a test handler wrote.

What tools share with tests (filling a stream, a free port, servers) is in ``harness``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

__all__ = ["effects"]


def effects(db: Path | str, table: str = "effects", column: str = "id") -> tuple[int, int]:
    """``(rows, distinct keys)`` of the effects table a test handler wrote (tests.handlers)."""
    con = sqlite3.connect(db)
    try:
        row: Any = con.execute(f"SELECT count(*), count(DISTINCT {column}) FROM {table}").fetchone()
        return int(row[0]), int(row[1])
    finally:
        con.close()
