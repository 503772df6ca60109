"""The SQLite ledger keeps applied sequences as runs (one row per batch, not per message)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from oncestream import SQLiteLedger
from oncestream.ledger import LedgerEntry
from oncestream.ledger._internal import read_applied_count


def _claim(ledger: SQLiteLedger, *seqs: int, stream: str = "S") -> list[bool]:
    with ledger.transaction() as tx:
        return tx.claim([LedgerEntry(stream, s) for s in sorted(seqs)])


def _runs(ledger: SQLiteLedger) -> list[tuple[str, int, int]]:
    sql = "SELECT stream, first_seq, last_seq FROM oncestream_applied_runs ORDER BY 1, 2"
    return [tuple(r) for r in ledger.connection.execute(sql)]  # type: ignore[misc]


def test_a_batch_of_consecutive_sequences_is_one_row(tmp_path: Path) -> None:
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        assert _claim(ledger, *range(1, 1001)) == [True] * 1000
        assert _claim(ledger, *range(1001, 2001)) == [True] * 1000
        assert _runs(ledger) == [("S", 1, 1000), ("S", 1001, 2000)]
        assert ledger.applied_count("S") == 2000


def test_redeliveries_inside_and_across_runs_are_found(tmp_path: Path) -> None:
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        _claim(ledger, *range(10, 21))
        _claim(ledger, 30, 31, 35)  # a filtered consumer: gaps
        assert _runs(ledger) == [("S", 10, 20), ("S", 30, 31), ("S", 35, 35)]
        # Old and new mixed: below, inside, between, at the edges and above the runs.
        seqs = [5, 9, 10, 15, 20, 21, 29, 30, 31, 32, 35, 36]
        assert _claim(ledger, *seqs) == [s in (5, 9, 21, 29, 32, 36) for s in seqs]
        assert _claim(ledger, *seqs) == [False] * len(seqs)
        assert ledger.is_applied(LedgerEntry("S", 21))
        assert not ledger.is_applied(LedgerEntry("S", 22))
        assert ledger.applied_count() == 11 + 3 + 6


def test_streams_are_kept_apart(tmp_path: Path) -> None:
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        with ledger.transaction() as tx:
            entries = [LedgerEntry("A", 1), LedgerEntry("A", 2), LedgerEntry("B", 1)]
            assert tx.claim(entries) == [True, True, True]
        with ledger.transaction() as tx:
            entries = [LedgerEntry("A", 2), LedgerEntry("B", 1), LedgerEntry("B", 2)]
            assert tx.claim(entries) == [False, False, True]
        assert ledger.applied_count("A") == 2 and ledger.applied_count("B") == 2


def test_random_claims_agree_with_a_set(tmp_path: Path) -> None:
    rng = random.Random(24)
    seen: set[int] = set()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        for _ in range(300):
            lo = rng.randrange(1, 2000)
            seqs = sorted(set(rng.sample(range(lo, lo + 60), rng.randrange(1, 40))))
            assert _claim(ledger, *seqs) == [s not in seen for s in seqs]
            seen.update(seqs)
            if rng.random() < 0.05:
                floor = rng.randrange(1, 2000)
                ledger.prune("S", floor)
                seen = {s for s in seen if s > floor}
                assert ledger.applied_count("S") == len(seen)
        assert all(ledger.is_applied(LedgerEntry("S", s)) for s in seen)
        assert ledger.applied_count("S") == len(seen)


@pytest.mark.parametrize("json_each", [True, False], ids=["json_each", "executemany"])
def test_a_partitions_sparse_batches_agree_with_a_set(tmp_path: Path, json_each: bool) -> None:
    """A group member's batch: one partition's sequences, the others' between them (most
    runs one sequence long, some longer), redelivered in part; claimed with one JSON
    array per batch where SQLite has ``json_each``, run by run where it does not."""
    rng = random.Random(49)
    seen: set[int] = set()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        assert ledger.connection is not None and ledger.json_each  # this SQLite has it
        ledger.json_each = json_each
        seq = 0
        for _ in range(40):
            batch = []
            for _ in range(rng.randrange(1, 500)):
                seq += rng.choice((1, 1, 2, 5, 8, 13))
                batch.append(seq)
            again = rng.sample(sorted(seen), min(len(seen), rng.randrange(0, 30)))
            seqs = sorted(set(batch) | set(again))
            assert _claim(ledger, *seqs) == [s not in seen for s in seqs]
            seen.update(seqs)
        assert ledger.applied_count("S") == len(seen)
        assert all(ledger.is_applied(LedgerEntry("S", s)) for s in seen)
        assert not any(
            ledger.is_applied(LedgerEntry("S", s)) for s in range(1, seq) if s not in seen
        )


def _old_ledger(path: Path, seqs: list[int]) -> None:
    """A ledger as oncestream wrote it before runs: a row per sequence."""
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE oncestream_applied (stream TEXT NOT NULL, seq INTEGER NOT NULL,"
        " applied_at REAL NOT NULL, PRIMARY KEY (stream, seq)) WITHOUT ROWID"
    )
    con.executemany("INSERT INTO oncestream_applied VALUES ('S', ?, 1.0)", [(s,) for s in seqs])
    con.commit()
    con.close()


def test_an_older_ledger_is_moved_into_runs_and_nothing_is_applied_again(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    old = [*range(1, 501), *range(600, 701), 800]
    _old_ledger(db, old)
    assert read_applied_count(f"sqlite:///{db}", "S") == len(old)  # read-only, as it was
    with SQLiteLedger(db) as ledger:
        assert _runs(ledger) == [("S", 1, 500), ("S", 600, 700), ("S", 800, 800)]
        assert _claim(ledger, 499, 500, 501, 800, 801) == [False, False, True, False, True]
        old_rows = ledger.connection.execute("SELECT count(*) FROM oncestream_applied")
        assert old_rows.fetchone()[0] == 0
    assert read_applied_count(f"sqlite:///{db}", "S") == len(old) + 2
    with SQLiteLedger(db) as ledger:  # opening again moves nothing twice
        assert ledger.applied_count("S") == len(old) + 2


def test_an_older_oncestream_cannot_claim_in_an_upgraded_ledger(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _old_ledger(db, [1, 2, 3])
    SQLiteLedger(db).open()
    con = sqlite3.connect(db)
    # What an older version's claim does: its read finds nothing, its insert must fail.
    assert con.execute("SELECT count(*) FROM oncestream_applied").fetchone()[0] == 0
    with pytest.raises(sqlite3.IntegrityError, match="oncestream_applied_runs"):
        con.execute("INSERT INTO oncestream_applied VALUES ('S', 2, 1.0)")
    con.close()
