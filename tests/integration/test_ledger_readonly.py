"""`status --ledger`: reading a ledger creates nothing (issue 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.ledger import LedgerEntry, PostgresLedger, SQLiteLedger
from oncestream.ledger._internal import read_applied_count


def _fill(ledger: SQLiteLedger | PostgresLedger, stream: str, rows: int) -> None:
    with ledger:
        tx = ledger.begin()
        tx.claim([LedgerEntry(stream, seq) for seq in range(1, rows + 1)])
        tx.commit()


def test_sqlite_counts_per_stream_and_never_creates(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _fill(SQLiteLedger(db), "S", 3)
    before = db.read_bytes()
    assert read_applied_count(f"sqlite:///{db}", "S") == 3
    assert read_applied_count(str(db), "OTHER") == 0
    assert db.read_bytes() == before
    with pytest.raises(ConfigError, match="no ledger at"):
        read_applied_count(f"sqlite:///{tmp_path}/typo.db", "S")
    assert not (tmp_path / "typo.db").exists()


@pytest.mark.postgres
def test_postgres_reads_and_refuses_a_database_without_ledger(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="no ledger in"):
        read_applied_count(postgres_url, "S")
    _fill(PostgresLedger(postgres_url), "S", 4)
    assert read_applied_count(postgres_url, "S") == 4
