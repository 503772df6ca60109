"""PostgreSQL: a per-message batch's writes go out in pipeline mode, every flush ended by a Sync.

What a handler sees from ``tx.execute`` inside ``tx.pipeline()`` (the Processor's
per-message batches), and what the server sees of a process frozen between two of
its statements: a session ``idle in transaction`` (so
``idle_in_transaction_session_timeout`` ends it), never ``active``.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from oncestream import PostgresLedger
from oncestream.ledger import LedgerEntry

pytestmark = pytest.mark.postgres

INSERT = "INSERT INTO effects (n, body) VALUES (%s, %s)"


@pytest.fixture
def ledger(postgres_url: str):  # type: ignore[no-untyped-def]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, n INT UNIQUE, body BYTEA)")
    led = PostgresLedger(postgres_url)
    led.open()
    yield led
    led.close()


def _state(url: str, pid: int, wanted: str | None, timeout: float = 3.0) -> str | None:
    """The session's pg_stat_activity state, once it is ``wanted`` (None: the session is
    gone) or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as watcher:
        while True:
            row = watcher.execute(
                "SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            state = None if row is None else row[0]
            if state == wanted or time.monotonic() > deadline:
                return state
            time.sleep(0.05)  # another process's state: nothing to await


def test_a_handler_stopped_after_its_statement_leaves_the_session_idle_in_transaction(
    ledger: PostgresLedger, postgres_url: str
) -> None:
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", 1)])
    pid = ledger.connection.info.backend_pid
    with tx.pipeline():
        tx.execute(INSERT, (1, b"x"))
        # The process stops here (SIGSTOP, a stuck VM) inside its batch: what the server
        # has received must end with a Sync, or the session waits "active" for ever.
        assert _state(postgres_url, pid, "idle in transaction") == "idle in transaction"
        tx.execute(INSERT, (2, b"y"))
    tx.commit()
    with psycopg.connect(postgres_url) as check:
        assert check.execute("SELECT count(*) FROM effects").fetchone() == (2,)


def test_the_idle_in_transaction_timeout_ends_a_frozen_batch_which_then_fails_to_commit(
    postgres_url: str,
) -> None:
    """docs/production.md: the timeout ends a frozen batch's session; its commit fails
    (a transient error: the batch is retried, and nothing of it was applied)."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, n INT UNIQUE, body BYTEA)")
        database = postgres_url.rsplit("/", 1)[1]
        admin.execute(
            f"ALTER DATABASE \"{database}\" SET idle_in_transaction_session_timeout = '1s'"
        )
    led = PostgresLedger(postgres_url)
    led.open()
    try:
        tx = led.begin()
        tx.claim([LedgerEntry("S", 1)])
        pid = led.connection.info.backend_pid
        with pytest.raises(psycopg.Error) as failed, tx.pipeline():
            tx.execute(INSERT, (1, b"x"))
            assert _state(postgres_url, pid, None, timeout=10) is None, "not ended"
        assert led.is_transient(failed.value)
        tx.rollback()
        # The ledger reconnects for the next batch, and neither the effect nor the claim
        # of the ended one is there.
        tx = led.begin()
        assert tx.claim([LedgerEntry("S", 1)]) == [True]
        tx.rollback()
    finally:
        led.close()
    with psycopg.connect(postgres_url) as check:
        assert check.execute("SELECT count(*) FROM effects").fetchone() == (0,)


def test_a_batch_waits_for_its_results_behind_a_sync_never_a_flush(
    ledger: PostgresLedger, tmp_path: Path
) -> None:
    """The server turns idle_in_transaction_session_timeout off on every message it reads
    and on again after a Sync: a Flush behind the last Sync (psycopg's way to wait for
    results at a block's end, or for a cursor's fetch) would leave a process frozen while
    it waits with its transaction open for good. Nothing sent may be a Flush."""
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        ledger.connection.pgconn.trace(out.fileno())
        try:
            tx = ledger.begin()
            tx.claim([LedgerEntry("S", 1)])
            with tx.pipeline():
                # Its result comes late: the block's end waits for it.
                tx.execute(
                    "INSERT INTO effects (n, body) SELECT %s, %s FROM pg_sleep(%s)",
                    (1, b"x", 0.3),
                )
            with tx.pipeline():
                tx.execute(INSERT, (2, b"y"))
                assert tx.connection.execute("SELECT count(*) FROM effects").fetchone() == (2,)
            tx.commit()
        finally:
            ledger.connection.pgconn.untrace()
    sent = [line.split("\t")[3] for line in trace.read_text().splitlines() if "\tF\t" in line]
    assert "Sync" in sent
    assert "Flush" not in sent, sent


def test_what_execute_returns_for_a_pipelined_write_and_for_everything_else(
    ledger: PostgresLedger,
) -> None:
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", 1)])
    with tx.pipeline():
        first = tx.execute(INSERT, (1, b"a"))
        tx.execute(INSERT, (2, None))  # a NULL parameter
        big = tx.execute(INSERT, (3, b"z" * 100_000))  # larger than a flush: its own Sync
        # A read goes through psycopg, in order behind the writes.
        assert tx.execute("SELECT count(*) FROM effects").fetchone() == (3,)
        assert first.rowcount == 1 and first.statusmessage == "INSERT 0 1"
        assert big.rowcount == 1
        with pytest.raises(psycopg.ProgrammingError, match="didn't produce records"):
            first.fetchone()
        updated = tx.execute("UPDATE effects SET body = %s WHERE n < %s", (b"b", 3))
        assert updated.rowcount == 2
        # Named placeholders and RETURNING go through psycopg (a cursor).
        named = tx.execute("INSERT INTO effects (n) VALUES (%(n)s)", {"n": 4})
        returned = tx.execute("INSERT INTO effects (n) VALUES (%s) RETURNING n", (5,))
        assert isinstance(named, psycopg.Cursor) and returned.fetchone() == (5,)
        # A literal percent sign and no parameters at all.
        tx.execute("UPDATE effects SET body = 'a%%b' WHERE n = %s", (4,))
        tx.execute("DELETE FROM effects WHERE n = 5")
    tx.commit()
    with psycopg.connect(ledger.url) as check:
        rows = check.execute("SELECT n, body FROM effects ORDER BY n").fetchall()
    assert [(n, bytes(b) if b else None) for n, b in rows] == [
        (1, b"b"),
        (2, b"b"),
        (3, b"z" * 100_000),
        (4, b"a%b"),
    ]


def test_a_failing_write_fails_its_block_with_its_own_error_and_nothing_is_kept(
    ledger: PostgresLedger,
) -> None:
    tx = ledger.begin()
    tx.claim([LedgerEntry("S", 1)])
    with pytest.raises(psycopg.errors.UniqueViolation), tx.pipeline():
        tx.execute(INSERT, (1, b"a"))
        tx.execute(INSERT, (1, b"again"))  # the unique n
        tx.execute(INSERT, (2, b"b"))
    tx.rollback()
    tx = ledger.begin()  # the statements prepared before still serve
    tx.claim([LedgerEntry("S", 1)])
    with tx.pipeline():
        tx.execute(INSERT, (7, b"c"))
    tx.commit()
    with psycopg.connect(ledger.url) as check:
        assert check.execute("SELECT n FROM effects").fetchall() == [(7,)]


def test_statements_dropped_by_someone_else_are_prepared_again_after_a_retry(
    ledger: PostgresLedger,
) -> None:
    def batch(seq: int) -> None:
        tx = ledger.begin()
        tx.claim([LedgerEntry("S", seq)])
        try:
            with tx.pipeline():
                tx.execute(INSERT, (seq, b"x"))
        except BaseException:
            tx.rollback()
            raise
        tx.commit()

    batch(1)
    ledger.connection.execute("DEALLOCATE ALL")  # a pooler, a DISCARD ALL
    ledger.connection.commit()
    with pytest.raises(psycopg.Error) as dropped:
        batch(2)
    assert ledger.is_transient(dropped.value), "a batch failing so is retried"
    batch(2)
    with psycopg.connect(ledger.url) as check:
        assert check.execute("SELECT n FROM effects ORDER BY n").fetchall() == [(1,), (2,)]


def test_a_batch_with_redelivered_messages_claims_only_the_new_ones(
    ledger: PostgresLedger,
) -> None:
    tx = ledger.begin()
    assert tx.claim([LedgerEntry("S", s) for s in (1, 2, 3)]) == [True] * 3
    tx.commit()
    tx = ledger.begin()  # 2 and 3 again (a redelivery), 4 and 5 new
    assert tx.claim([LedgerEntry("S", s) for s in (2, 3, 4, 5)]) == [False, False, True, True]
    with tx.pipeline():
        tx.execute(INSERT, (4, b"x"))
    tx.commit()
    assert ledger.applied_count("S") == 5


def test_merged_inserts_keep_the_order_of_everything_around_them(postgres_url: str) -> None:
    """``merge_inserts``: a run of one-row inserts goes out as multi-row INSERTs, sent
    before whatever comes next, including a statement sent through ``tx.connection``."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, n INT UNIQUE, body BYTEA)")
        admin.execute("CREATE TABLE seen (n BIGINT)")
    led = PostgresLedger(postgres_url, merge_inserts=True)
    led.open()
    try:
        tx = led.begin()
        tx.claim([LedgerEntry("S", 1)])
        with tx.pipeline():
            rows = [tx.execute(INSERT, (n, b"x")) for n in range(1, 301)]
            tx.connection.execute("INSERT INTO seen SELECT count(*) FROM effects")
            tx.execute(INSERT, (1000, None))
            tx.execute(INSERT, (1001, b"y"))
            updated = tx.execute("UPDATE effects SET body = %s WHERE n >= %s", (b"z", 1000))
            assert (rows[0].rowcount, rows[-1].statusmessage) == (1, "INSERT 0 1")
            assert updated.rowcount == 2
        tx.commit()
        tx = led.begin()
        tx.claim([LedgerEntry("S", 2)])
        with pytest.raises(psycopg.errors.UniqueViolation), tx.pipeline():
            for n in range(2000, 2010):
                tx.execute(INSERT, (n, b"x"))
            tx.execute(INSERT, (5, b"taken"))
        tx.rollback()
    finally:
        led.close()
    with psycopg.connect(postgres_url) as check:
        assert check.execute("SELECT n FROM seen").fetchall() == [(300,)]
        assert check.execute("SELECT count(*), min(n), max(n) FROM effects").fetchone() == (
            302,
            1,
            1001,
        )
        # Sequence values in the order of the calls, as one insert each would give them.
        ids = check.execute("SELECT n FROM effects ORDER BY id").fetchall()
        assert [n for (n,) in ids] == [*range(1, 301), 1000, 1001]


def _binds(trace: Path) -> int:
    """Bind messages the client sent (one per statement executed)."""
    return sum(
        1 for line in trace.read_text().splitlines() if "\tF\t" in line and "\tBind\t" in line
    )


def test_auto_merges_only_into_plain_tables_without_triggers_or_rules(
    postgres_url: str, tmp_path: Path
) -> None:
    """``merge_inserts="auto"``: a table with an ``AFTER`` row trigger (each firing sees
    the rows of its own statement: one, then two, ...) and one with a foreign key (checked
    at the end of each statement) get one INSERT a call, as without merging; a plain
    table's run of inserts goes out as multi-row INSERTs (fewer statements than rows);
    a trigger created between two batches is seen by the second."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE plain (n INT)")
        admin.execute("CREATE TABLE watched (n INT)")
        admin.execute("CREATE TABLE saw (t TEXT, n INT, seen BIGINT)")
        admin.execute(  # the rows of its table this firing sees
            "CREATE FUNCTION record_seen() RETURNS trigger LANGUAGE plpgsql AS $$"
            " DECLARE c BIGINT; BEGIN"
            " EXECUTE format('SELECT count(*) FROM %I', TG_TABLE_NAME) INTO c;"
            " INSERT INTO saw VALUES (TG_TABLE_NAME, NEW.n, c); RETURN NULL; END $$"
        )
        admin.execute(
            "CREATE TRIGGER w AFTER INSERT ON watched FOR EACH ROW EXECUTE FUNCTION record_seen()"
        )
        admin.execute("CREATE TABLE nodes (id INT PRIMARY KEY, parent INT REFERENCES nodes)")
    led = PostgresLedger(postgres_url, merge_inserts="auto")
    led.open()
    trace = tmp_path / "libpq.trace"

    def batch(seq: int, table: str, rows: int) -> int:
        """Insert 1..rows into table in one batch; the statements it cost."""
        tx = led.begin()
        tx.claim([LedgerEntry("S", seq)])
        with trace.open("w") as out:
            led.connection.pgconn.trace(out.fileno())
            try:
                with tx.pipeline():
                    for n in range(1, rows + 1):
                        tx.execute(f"INSERT INTO {table} (n) VALUES (%s)", (n,))
            finally:
                led.connection.pgconn.untrace()
        tx.commit()
        return _binds(trace)

    try:
        assert batch(1, "plain", 300) < 30, "a plain table's inserts merged"
        assert batch(2, "watched", 20) >= 20
        # A row referring to one inserted after it: refused at the end of its own
        # statement (merged into one statement with the other, it would pass).
        tx = led.begin()
        tx.claim([LedgerEntry("S", 3)])
        with pytest.raises(psycopg.errors.ForeignKeyViolation), tx.pipeline():
            for row in ((10, None), (1, 2), (2, None)):  # the first one asks about the table
                tx.execute("INSERT INTO nodes (id, parent) VALUES (%s, %s)", row)
        tx.rollback()
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "CREATE TRIGGER p AFTER INSERT ON plain FOR EACH ROW EXECUTE FUNCTION record_seen()"
            )
        assert batch(4, "plain", 20) >= 20, "the trigger created since the last batch is seen"
    finally:
        led.close()
    with psycopg.connect(postgres_url) as check:
        seen = check.execute("SELECT t, n, seen FROM saw ORDER BY t, n").fetchall()
        assert check.execute("SELECT count(*) FROM plain").fetchone() == (320,)
    # Each firing saw its own row and those of the statements before it (merged, the
    # rows of one INSERT would all see the last of them).
    assert seen == [("plain", n, 300 + n) for n in range(1, 21)] + [
        ("watched", n, n) for n in range(1, 21)
    ]
