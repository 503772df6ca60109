"""The ledger contract, for both backends (PostgreSQL on a throw-away server)."""

from __future__ import annotations

import threading

import pytest

from oncestream import ConfigError, SQLiteLedger
from oncestream.ledger import Horizon, Ledger, LedgerEntry, PostgresLedger, ledger_from_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def make_ledger(request, tmp_path):  # type: ignore[no-untyped-def]
    made: list[Ledger] = []

    def make(key: str = "sequence") -> Ledger:
        if request.param == "sqlite":
            ledger: Ledger = SQLiteLedger(tmp_path / "ledger.db", key=key)  # type: ignore[arg-type]
        else:
            url = request.getfixturevalue("postgres_url")
            ledger = PostgresLedger(url, key=key)  # type: ignore[arg-type]
        ledger.open()
        tx = ledger.begin()
        tx.execute("CREATE TABLE IF NOT EXISTS effects (n INTEGER)")
        tx.commit()
        made.append(ledger)
        return ledger

    yield make
    for ledger in made:
        ledger.close()


def _effects(ledger: Ledger) -> int:
    tx = ledger.begin()
    try:
        return int(tx.execute("SELECT count(*) FROM effects").fetchone()[0])
    finally:
        tx.rollback()


def test_claim_commit_then_suppressed(make_ledger) -> None:  # type: ignore[no-untyped-def]
    ledger = make_ledger()
    entries = [LedgerEntry("S", seq) for seq in (1, 2, 3)]
    tx = ledger.begin()
    assert tx.claim(entries) == [True, True, True]
    tx.execute("INSERT INTO effects (n) VALUES (1)")
    tx.commit()
    assert ledger.applied_count("S") == 3
    assert ledger.is_applied(LedgerEntry("S", 2))
    tx = ledger.begin()
    assert tx.claim([LedgerEntry("S", 3), LedgerEntry("S", 4)]) == [False, True]
    tx.commit()
    assert ledger.applied_count() == 4
    # Same sequence on another stream is a different message.
    tx = ledger.begin()
    assert tx.claim([LedgerEntry("T", 1)]) == [True]
    tx.commit()


def test_rollback_drops_effects_and_claims(make_ledger) -> None:  # type: ignore[no-untyped-def]
    ledger = make_ledger()
    tx = ledger.begin()
    assert tx.claim([LedgerEntry("S", 7)]) == [True]
    tx.execute("INSERT INTO effects (n) VALUES (7)")
    tx.rollback()
    assert _effects(ledger) == 0
    assert not ledger.is_applied(LedgerEntry("S", 7))
    tx = ledger.begin()
    assert tx.claim([LedgerEntry("S", 7)]) == [True]
    tx.commit()


def test_msg_id_key_catches_republished_duplicates(make_ledger) -> None:  # type: ignore[no-untyped-def]
    ledger = make_ledger(key="msg_id")
    tx = ledger.begin()
    fresh = tx.claim([LedgerEntry("S", 1, "a"), LedgerEntry("S", 2, "b"), LedgerEntry("S", 3, "a")])
    tx.commit()
    assert fresh == [True, True, False]  # seq 3 repeats msg id "a"
    tx = ledger.begin()
    assert tx.claim([LedgerEntry("S", 9, "b"), LedgerEntry("S", 10, None)]) == [False, True]
    tx.commit()
    assert ledger.is_applied(LedgerEntry("S", 99, "a"))


def test_prune_is_bounded_and_below_floor(make_ledger) -> None:  # type: ignore[no-untyped-def]
    ledger = make_ledger()
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", seq) for seq in range(1, 101)])
    tx.commit()
    # limit bounds the rows one call deletes: a sequence each in PostgreSQL, a run of
    # consecutive sequences in SQLite (the 100 claimed above are one run, cut at once).
    pruned = [ledger.prune("S", 50, limit=30) for _ in range(3)]
    expected = [50, 0, 0] if isinstance(ledger, SQLiteLedger) else [30, 20, 0]
    assert pruned == expected
    assert ledger.applied_count("S") == 50
    assert ledger.is_applied(LedgerEntry("S", 51))
    assert not ledger.is_applied(LedgerEntry("S", 50))


def test_ledger_from_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ledger = ledger_from_url(f"sqlite:///{tmp_path}/x.db")  # sqlite:////abs
    assert isinstance(ledger, SQLiteLedger)
    assert ledger.path == f"{tmp_path}/x.db"
    assert isinstance(ledger_from_url("postgresql://u:secret@h/db"), PostgresLedger)
    assert "secret" not in repr(ledger_from_url("postgresql://u:secret@h/db"))
    with pytest.raises(ConfigError, match="sqlite:// or postgresql://"):
        ledger_from_url("mysql://h/db")
    with pytest.raises(ConfigError, match="names no file"):
        ledger_from_url("sqlite://")
    with pytest.raises(ConfigError, match="key must be"):
        SQLiteLedger(tmp_path / "y.db", key="bad")  # type: ignore[arg-type]


def test_sqlite_uses_wal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with SQLiteLedger(tmp_path / "w.db") as ledger:
        assert isinstance(ledger, SQLiteLedger)
        mode = ledger.connection.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_prune_records_its_span_as_the_consumers_horizon(make_ledger) -> None:  # type: ignore[no-untyped-def]
    """The sequences a consumer's prune deleted stay known (its filter with them)."""
    ledger = make_ledger()
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", seq) for seq in (*range(5, 21), *range(30, 41))])
    tx.commit()
    assert ledger.prune("S", 35, consumer="c", filters=("s.b", "s.a")) == 16 + 6
    assert ledger.horizons("S", "c") == [Horizon(5, 35, ("s.a", "s.b"))]
    assert ledger.prune("S", 50, consumer="c", filters=("s.b", "s.a")) == 5
    assert ledger.horizons("S", "c") == [Horizon(5, 40, ("s.a", "s.b"))]  # 40: the last row
    assert ledger.prune("S", 60, consumer="c", filters=("s.a", "s.b")) == 0  # nothing: unchanged
    assert ledger.horizons("S", "c") == [Horizon(5, 40, ("s.a", "s.b"))]
    assert ledger.horizons("S", "other") == [] and ledger.horizons("T", "c") == []
    # Inside a transaction the same (read first in every batch of a Processor).
    tx = ledger.begin()
    assert tx.horizons("S", "c") == [Horizon(5, 40, ("s.a", "s.b"))]
    tx.rollback()
    # Another filter is another horizon; a prune without a consumer records none.
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", seq) for seq in range(41, 46)])
    tx.commit()
    ledger.prune("S", 42, consumer="c")
    ledger.prune("S", 45)
    assert sorted(ledger.horizons("S", "c")) == [Horizon(5, 40, ("s.a", "s.b")), Horizon(41, 42)]
    inside = Horizon(5, 40, ("s.a", "s.b"))
    assert inside.covers(5, "s.a") and inside.covers(40, "s.b")
    assert not inside.covers(4, "s.a") and not inside.covers(41, "s.a")
    assert not inside.covers(20, "s.c") and Horizon(41, 42).covers(41, "any.thing")


def test_a_prune_waits_for_a_transaction_that_read_the_horizons(make_ledger) -> None:  # type: ignore[no-untyped-def]
    """A batch read the horizons, then claims: a prune in between would let it apply a
    message whose row it deletes. The prune waits for the batch to end."""
    ledger, pruner = make_ledger(), make_ledger()
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", seq) for seq in range(1, 11)])
    tx.commit()
    batch = ledger.begin()
    assert batch.horizons("S", "c") == []
    done = threading.Event()
    thread = threading.Thread(
        target=lambda: (pruner.prune("S", 10, consumer="c"), done.set()), daemon=True
    )
    thread.start()
    assert not done.wait(0.5)  # blocked by the batch
    assert batch.claim([LedgerEntry("S", 3)]) == [False]  # its row is still there
    batch.commit()
    assert done.wait(10)
    thread.join(10)
    assert ledger.horizons("S", "c") == [Horizon(1, 10)]
