"""PostgreSQL ledger: racing claims on one key serialise on the primary key."""

from __future__ import annotations

import threading

import pytest

from oncestream.ledger import LedgerEntry, PostgresLedger

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("first_commits", [True, False])
def test_second_claim_waits_for_the_first(postgres_url: str, first_commits: bool) -> None:
    a, b = PostgresLedger(postgres_url), PostgresLedger(postgres_url)
    a.open()
    b.open()
    try:
        tx_a = a.begin()
        assert tx_a.claim([LedgerEntry("S", 5)]) == [True]
        result: list[list[bool]] = []
        tx_b = b.begin()
        racer = threading.Thread(target=lambda: result.append(tx_b.claim([LedgerEntry("S", 5)])))
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), "the second claim must block on the uncommitted first one"
        if first_commits:
            tx_a.commit()
        else:
            tx_a.rollback()
        racer.join(10)
        assert result == [[not first_commits]]
        tx_b.commit()
        assert a.applied_count("S") == 1
    finally:
        a.close()
        b.close()
