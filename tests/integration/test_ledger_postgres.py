"""PostgreSQL ledger: racing claims on one key serialise on the primary key; a session
lost under an idle ledger is ridden out (a new connection), never a raw driver error."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from oncestream import LedgerError
from oncestream.ledger import LedgerEntry, PostgresLedger, Registration

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


def _end_session(url: str, pid: int) -> None:
    """Terminate one session (what a PostgreSQL restart does to every session), waiting
    until it has ended."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()
    assert row == (True,)


def _allow_connections(server_url: str, url: str, allowed: bool) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}')


_MINE = Registration("S", "c", ("s.a",), "2026-01-01T00:00:00Z", 0)

#: Each call made outside a batch transaction: what it returns with the ledger above.
_CALLS: dict[str, tuple[Callable[[PostgresLedger], object], object]] = {
    "registrations": (lambda ledger: ledger.registrations("S"), [_MINE]),
    "horizons": (lambda ledger: ledger.horizons("S", "c"), []),
    "register": (lambda ledger: ledger.register(_MINE, lambda _others: None), None),
    "record_floors": (lambda ledger: ledger.record_floors("S", {"c": 0}), None),
    "prune": (lambda ledger: ledger.prune("S", 3, consumer="c", filters=("s.a",)), 0),
    "applied_count": (lambda ledger: ledger.applied_count("S"), 0),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_a_call_on_a_lost_session_reconnects(postgres_url: str, call: str) -> None:
    """Its session ended while the ledger sat idle (PostgreSQL restarted, killed): the
    next call finds the connection lost and runs again on a new one. Before, the failed
    rollback's raw ``psycopg.OperationalError`` replaced the translated error."""
    run, expected = _CALLS[call]
    ledger = PostgresLedger(postgres_url)
    with ledger:
        ledger.register(_MINE, lambda _others: None)
        old = ledger.connection
        _end_session(postgres_url, old.info.backend_pid)
        assert run(ledger) == expected
        assert ledger.connection is not old and not ledger.connection.closed
        assert ledger.registrations("S") == [_MINE]


def test_a_lost_session_that_cannot_reconnect_is_a_ledger_error(  # type: ignore[no-untyped-def]
    postgres_server, postgres_url: str
) -> None:
    """The database stays unreachable: a LedgerError (retried by the Processor), never the
    driver's error; the next call once it is back succeeds."""
    ledger = PostgresLedger(postgres_url)
    with ledger:
        ledger.register(_MINE, lambda _others: None)
        _allow_connections(postgres_server.url, postgres_url, False)
        try:
            _end_session(postgres_server.url, ledger.connection.info.backend_pid)
            for name in sorted(_CALLS):
                with pytest.raises(LedgerError) as failed:
                    _CALLS[name][0](ledger)
                assert not isinstance(failed.value, psycopg.Error)
                assert "not currently accepting connections" in str(failed.value), name
        finally:
            _allow_connections(postgres_server.url, postgres_url, True)
        assert ledger.registrations("S") == [_MINE]
