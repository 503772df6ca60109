"""The throw-away PostgreSQL used by ledger and foreachBatch tests really runs."""

import psycopg


def test_fresh_database_per_test(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as db:
        assert db.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname='public'"
        ).fetchone() == (0,)
