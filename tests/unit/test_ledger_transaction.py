"""The ledger's transaction helper, shared by the Processor and foreachBatch."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from oncestream._dsn import parse_dsn
from oncestream.ledger import SQLiteLedger
from oncestream.ledger._internal import ledger_from_dsn


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as con:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_transaction_commits_at_the_end_and_rolls_back_on_error(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with SQLiteLedger(db) as ledger:
        with ledger.transaction() as tx:
            tx.execute("CREATE TABLE t (x INTEGER)")
            tx.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
        with pytest.raises(RuntimeError), ledger.transaction() as tx:
            tx.execute("INSERT INTO t VALUES (3)")
            raise RuntimeError("handler failed")
        assert ledger.connection.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]


def test_tables_false_creates_no_ledger_tables(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    ledger = ledger_from_dsn(parse_dsn(f"sqlite:///{db}"), tables=False)
    with ledger, ledger.transaction() as tx:
        tx.execute("CREATE TABLE mine (x INTEGER)")
    assert _tables(db) == {"mine"}
    with ledger_from_dsn(parse_dsn(f"sqlite:///{db}")):
        pass
    assert {"oncestream_applied_runs", "oncestream_msg_ids"} <= _tables(db)
